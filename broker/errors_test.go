package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/cluster"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// A namespace whose policies cannot be read right now is not a missing
// namespace: the Go client stops reconnecting for good on TopicNotFound,
// so a consumer that looked up through a region whose global-store member
// was paused never came back (CI, TestAutomaticFailoverOnSilentOutage).
func TestNamespaceReadErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want pb.ServerError
	}{
		{fmt.Errorf("%w: namespaces/public/x", meta.ErrNotFound), pb.ServerError_TopicNotFound},
		{context.DeadlineExceeded, pb.ServerError_ServiceNotReady},
		{fmt.Errorf("etcd: %w", context.Canceled), pb.ServerError_ServiceNotReady},
		{errors.New("rpc error: code = Unavailable desc = connection refused"), pb.ServerError_ServiceNotReady},
		{fmt.Errorf("%w: /x", cluster.ErrNotFound), pb.ServerError_TopicNotFound},
	} {
		if got := serverError(namespaceErr("public/x", tc.err)); got != tc.want {
			t.Errorf("reading the namespace failed with %q: answered %v, want %v", tc.err, got, tc.want)
		}
	}
}
