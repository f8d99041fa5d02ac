package admin

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/httpserve"
	"github.com/prometheus/client_golang/prometheus"
)

type denyAll struct{}

func (denyAll) AuthorizeAdmin(*http.Request, string) (string, error) {
	return "", fmt.Errorf("%w: no credentials", meta.ErrAuthentication)
}

func (denyAll) AuditAdmin(*http.Request, string, string, int, error) {}

func (denyAll) AuthorizeSecret(*http.Request) error {
	return fmt.Errorf("%w: no credentials", meta.ErrAuthentication)
}

// startLimited starts an admin server on a real listener with short
// timeouts and a cap of 2 connections, every request refused with 401.
func startLimited(t *testing.T) (*Server, httpserve.Options) {
	t.Helper()
	opts := httpserve.Options{ReadHeaderTimeout: time.Second, ReadTimeout: time.Second, IdleTimeout: time.Second, WriteTimeout: 5 * time.Second, MaxConns: 2}
	s := New(Config{Addr: "127.0.0.1:0", Metrics: prometheus.NewRegistry(), Auth: denyAll{}, HTTP: opts})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, opts
}

func dialAdmin(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(s.URL(), "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reads (and discards) from c until the server closes it,
// and fails the test if that takes longer than d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: still open after %v", what, d)
	}
	t.Logf("%s: closed by the server after %v", what, time.Since(start).Round(10*time.Millisecond))
}

// Issue 30, item 5: a request body trickled byte by byte to a route that
// refuses it (401) is cut off at ReadTimeout (before, the server read it
// for as long as it trickled, then waited for the next request).
func TestAdminClosesTricklingBody(t *testing.T) {
	s, opts := startLimited(t)
	c := dialAdmin(t, s)
	fmt.Fprint(c, "POST /admin/v2/meridian/failover/public/default HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	// net/http reads the rest of a short body before it answers (so
	// the client is not reset): the 401, if any, and the close come
	// together.
	closedWithin(t, c, opts.ReadTimeout+2*time.Second, "a trickling body")
}

// Issue 30, item 5: a keep-alive connection left idle after a 401 is
// closed at IdleTimeout.
func TestAdminClosesIdleKeepAlive(t *testing.T) {
	s, opts := startLimited(t)
	c := dialAdmin(t, s)
	fmt.Fprint(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || resp.Close {
		t.Fatalf("answer %v %v, want a kept-alive 401", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	closedWithin(t, c, opts.IdleTimeout+2*time.Second, "an idle keep-alive")
}

// Issue 30, item 5: no more than MaxConns connections are served at once;
// one more is served when one of them closes.
func TestAdminConnectionCap(t *testing.T) {
	s, _ := startLimited(t)
	held := []net.Conn{dialAdmin(t, s), dialAdmin(t, s)}
	for _, c := range held { // accepted: each answers
		fmt.Fprint(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatal(err)
		}
	}
	third := dialAdmin(t, s) // TCP completes in the kernel's accept queue
	fmt.Fprint(third, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(third)
	third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if resp, err := http.ReadResponse(br, nil); err == nil {
		t.Fatalf("a third connection was served past MaxConns 2: %v", resp.Status)
	}
	held[0].Close()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("third connection after one closed: %v %v", resp, err)
	}
}
