package transport

import (
	"context"
	"log/slog"
	"time"

	"github.com/meridian-mq/meridian/cluster"
)

// The endpoint registry: where the brokers of every region publish their
// replication addresses, in the global store.

// EndpointsKey is the prefix of the registry:
// /replication/endpoints/REGION/BROKER holds a broker's replication
// address.
const EndpointsKey = "/replication/endpoints/"

// EndpointKey is the key of broker's replication address in region.
func EndpointKey(region, broker string) string { return EndpointsKey + region + "/" + broker }

// Endpoints lists the registered replication addresses of region's
// brokers.
func Endpoints(ctx context.Context, store *cluster.Store, region string) ([]string, error) {
	return store.ListValues(ctx, EndpointsKey+region+"/")
}

// KV is a key and its value, registered under a lease.
type KV struct {
	Key   string
	Value []byte
}

// Register keeps kvs in store, all bound to one lease of ttl, until ctx
// ends (then it revokes the lease, deleting them): after a lost lease or
// a failed write it registers again, a second later. It returns when ctx
// ends. The caller runs it on a goroutine of its own; log says what it
// retries.
func Register(ctx context.Context, store *cluster.Store, ttl time.Duration, kvs []KV, log *slog.Logger) {
	for ctx.Err() == nil {
		lease, err := store.GrantLease(ctx, ttl)
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			for _, kv := range kvs {
				if _, err = store.PutWithLease(wctx, kv.Key, kv.Value, lease.ID); err != nil {
					break
				}
			}
			cancel()
			if err == nil {
				select {
				case <-lease.Lost():
					log.Warn("replication endpoint lease lost; registering again")
					continue
				case <-ctx.Done():
					rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
					_ = lease.Revoke(rctx)
					rcancel()
					return
				}
			}
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			_ = lease.Revoke(rctx)
			rcancel()
		}
		log.Warn("replication endpoint not registered in the global store; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
