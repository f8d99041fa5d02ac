package clientopts

import (
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

func TestApplySetsOnlyWhatIsUnset(t *testing.T) {
	var o pulsar.ClientOptions
	Apply(&o)
	if o.ConnectionTimeout != ConnectionTimeout || o.KeepAliveInterval != KeepAliveInterval || o.OperationTimeout != OperationTimeout {
		t.Fatalf("zero options: got %v %v %v", o.ConnectionTimeout, o.KeepAliveInterval, o.OperationTimeout)
	}
	o = pulsar.ClientOptions{ConnectionTimeout: 7 * time.Second, KeepAliveInterval: 9 * time.Second, OperationTimeout: 11 * time.Second}
	Apply(&o)
	if o.ConnectionTimeout != 7*time.Second || o.KeepAliveInterval != 9*time.Second || o.OperationTimeout != 11*time.Second {
		t.Fatalf("set options changed: %v %v %v", o.ConnectionTimeout, o.KeepAliveInterval, o.OperationTimeout)
	}
}
