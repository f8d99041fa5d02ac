package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// These tests run the unmodified pulsar-client-go against a real
// `meridian standalone` process (etcd, bookies and broker).

var (
	sharedOnce sync.Once
	shared     *testutil.Standalone
)

func quietLogger() plog.Logger {
	return plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// lockedBuffer is a bytes.Buffer safe for the client's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// keptLogger is a client logger whose last lines the test prints when it
// fails (what the client saw is often the only clue to a stall).
func keptLogger(t testing.TB) plog.Logger {
	buf := &lockedBuffer{}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		buf.mu.Lock()
		lines := strings.Split(strings.TrimSpace(buf.b.String()), "\n")
		buf.mu.Unlock()
		if len(lines) > 150 {
			lines = lines[len(lines)-150:]
		}
		t.Logf("---- last lines of the client's log ----\n%s", strings.Join(lines, "\n"))
	})
	return plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

func newPulsarClient(t testing.TB, url string) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               url,
		ConnectionTimeout: 5 * time.Second,
		OperationTimeout:  30 * time.Second,
		Logger:            quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func topicName(t testing.TB) string {
	return fmt.Sprintf("persistent://public/default/%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

func produce(t testing.TB, p pulsar.Producer, n int, keyOf func(int) string) []pulsar.MessageID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := make([]pulsar.MessageID, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := 0; i < n; i++ {
		wg.Add(1)
		msg := &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i))}
		if keyOf != nil {
			msg.Key = keyOf(i)
		}
		p.SendAsync(ctx, msg, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			ids[i] = id
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("send: %v", firstErr)
	}
	return ids
}
