package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/meridian-mq/meridian/internal/clientopts"
	"github.com/spf13/cobra"
)

// meridian produce / consume: small pulsar-client-go tools to try a
// deployment by hand (produce in one region, consume in another).

func pulsarClient(url string, cf *clientFlags) (pulsar.Client, error) {
	o := pulsar.ClientOptions{
		URL: url,
		// The client logs every reconnect at info level; keep the
		// terminal for the messages unless --log-level debug.
		Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(clientLogOut(), nil))),
	}
	if err := cf.pulsarOptions(&o); err != nil {
		return nil, err
	}
	// The recommended timeouts (a silently dead region is left in
	// seconds, not minutes; internal/clientopts), unless flags set them.
	clientopts.Apply(&o)
	return pulsar.NewClient(o)
}

func clientLogOut() io.Writer {
	if logLevel == "debug" {
		return os.Stderr
	}
	return io.Discard
}

func newProduceCmd() *cobra.Command {
	var url, topic, prefix, key string
	var cf clientFlags
	var n int
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Send N messages to a topic with pulsar-client-go and print each message id",
		Example: `  meridian produce --url pulsar://127.0.0.1:6650 --topic my-topic --messages 10
  meridian produce --url "$(jq -r '.regions[0].service_url' data/up/endpoints.json)" --topic t --messages 5`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if topic == "" {
				return errors.New("--topic is required")
			}
			ctx, stop := signalContext()
			defer stop()
			c, err := pulsarClient(url, &cf)
			if err != nil {
				return err
			}
			defer c.Close()
			p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
			if err != nil {
				return fmt.Errorf("producer on %s: %w", topic, err)
			}
			defer p.Close()
			for i := range n {
				payload := fmt.Sprintf("%s-%d", prefix, i)
				sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				id, err := p.Send(sctx, &pulsar.ProducerMessage{Payload: []byte(payload), Key: key})
				cancel()
				if err != nil {
					return fmt.Errorf("send %d: %w", i, err)
				}
				fmt.Printf("sent %q id %s\n", payload, msgID(id))
			}
			return nil
		},
	}
	f := cmd.Flags()
	cf.register(f)
	f.StringVar(&url, "url", "pulsar://127.0.0.1:6650", "service URL (pulsar://host:port[,host:port...])")
	f.StringVar(&topic, "topic", "", "topic (my-topic or persistent://tenant/ns/topic)")
	f.IntVar(&n, "messages", 10, "messages to send")
	f.StringVar(&prefix, "payload", "hello", "payload prefix: messages are PREFIX-0, PREFIX-1, ...")
	f.StringVar(&key, "key", "", "message key (default none)")
	return cmd
}

func newConsumeCmd() *cobra.Command {
	var url, topic, subName, subType, start string
	var cf clientFlags
	var count int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Receive messages from a topic with pulsar-client-go, print and acknowledge them",
		Long: `consume subscribes (a durable subscription, created at the earliest
message by default) and prints each message with its id, key and
producer name, then acknowledges it. It stops after --count messages (0: until Ctrl-C) or after
--timeout without a message (0: never).`,
		Example: `  meridian consume --url pulsar://127.0.0.1:6650 --topic my-topic --subscription s --count 10`,
		Args:    cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if topic == "" || subName == "" {
				return errors.New("--topic and --subscription are required")
			}
			types := map[string]pulsar.SubscriptionType{"exclusive": pulsar.Exclusive, "shared": pulsar.Shared, "failover": pulsar.Failover, "key_shared": pulsar.KeyShared}
			st, ok := types[subType]
			if !ok {
				return fmt.Errorf("--type %q: want exclusive, shared, failover or key_shared", subType)
			}
			pos := map[string]pulsar.SubscriptionInitialPosition{"earliest": pulsar.SubscriptionPositionEarliest, "latest": pulsar.SubscriptionPositionLatest}
			ip, ok := pos[start]
			if !ok {
				return fmt.Errorf("--start %q: want earliest or latest", start)
			}
			ctx, stop := signalContext()
			defer stop()
			c, err := pulsarClient(url, &cf)
			if err != nil {
				return err
			}
			defer c.Close()
			cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: subName, Type: st, SubscriptionInitialPosition: ip})
			if err != nil {
				return fmt.Errorf("subscribe to %s: %w", topic, err)
			}
			defer cons.Close()
			for got := 0; count == 0 || got < count; got++ {
				rctx, cancel := ctx, context.CancelFunc(func() {})
				if timeout > 0 {
					rctx, cancel = context.WithTimeout(ctx, timeout)
				}
				m, err := cons.Receive(rctx)
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					if errors.Is(err, context.DeadlineExceeded) {
						return fmt.Errorf("no message within %v (received %d)", timeout, got)
					}
					return err
				}
				fmt.Printf("received %q id %s key %q producer %s topic %s\n", m.Payload(), msgID(m.ID()), m.Key(), m.ProducerName(), m.Topic())
				if err := cons.Ack(m); err != nil {
					return fmt.Errorf("ack: %w", err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	cf.register(f)
	f.StringVar(&url, "url", "pulsar://127.0.0.1:6650", "service URL (pulsar://host:port[,host:port...])")
	f.StringVar(&topic, "topic", "", "topic (my-topic or persistent://tenant/ns/topic)")
	f.StringVar(&subName, "subscription", "", "subscription name")
	f.StringVar(&subType, "type", "exclusive", "subscription type: exclusive | shared | failover | key_shared")
	f.StringVar(&start, "start", "earliest", "where a new subscription starts: earliest | latest")
	f.IntVar(&count, "count", 0, "stop after this many messages (0: until Ctrl-C)")
	f.DurationVar(&timeout, "timeout", 0, "stop with an error when no message arrives for this long (0: wait forever)")
	return cmd
}

// msgID prints a message id as ledger:entry:batch-index, the same in
// every region (a replicated message keeps its origin id).
func msgID(id pulsar.MessageID) string {
	return fmt.Sprintf("%d:%d:%d", id.LedgerID(), id.EntryID(), id.BatchIdx())
}
