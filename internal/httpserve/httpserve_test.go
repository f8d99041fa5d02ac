package httpserve

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/tlsutil"
)

// The defaults, printed: a change to one shows here and must be
// explained beside the field (Options).
func TestDefaultOptions(t *testing.T) {
	got := fmt.Sprintf("%+v", DefaultOptions())
	want := "{ReadHeaderTimeout:10s ReadTimeout:30s WriteTimeout:1m0s IdleTimeout:30s MaxConns:256 MaxHeaderBytes:65536 Logger:<nil>}"
	if got != want {
		t.Fatalf("DefaultOptions\n got %s\nwant %s", got, want)
	}
	o := Options{ReadTimeout: time.Second, MaxConns: -1}.WithDefaults()
	if o.ReadTimeout != time.Second || o.MaxConns != -1 || o.WriteTimeout != time.Minute || o.Logger == nil {
		t.Fatalf("WithDefaults kept %+v", o)
	}
	if New(http.NotFoundHandler(), Options{MaxConns: -1}).sem != nil {
		t.Fatal("MaxConns -1 still capped")
	}
}

// The cap holds on a TLS listener too, and the handler still sees the
// TLS connection (r.TLS): the cap must not hide the *tls.Conn from
// net/http, as netutil.LimitListener's wrapper would.
func TestConnectionCapOverTLS(t *testing.T) {
	ca, err := tlsutil.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(tlsutil.LocalLeaf("srv", ""))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.TLS != nil)
	}), Options{MaxConns: 1, Logger: slog.New(slog.DiscardHandler)})
	go s.Serve(tls.NewListener(raw, &tls.Config{Certificates: []tls.Certificate{cert}}))
	defer s.Close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	dial := func() *tls.Conn {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", raw.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	get := func(c net.Conn, wait time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(wait))
		if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return b.String(), nil
	}
	first := dial()
	if got, err := get(first, 5*time.Second); err != nil || got != "true" {
		t.Fatalf("first connection: %q %v, want r.TLS set", got, err)
	}
	// A second TCP connection is not accepted while the first is open:
	// its TLS handshake cannot even start.
	c, err := net.DialTimeout("tcp", raw.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	second := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	second.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if err := second.Handshake(); err == nil {
		t.Fatal("a second connection was served past MaxConns 1")
	}
	c.Close() // it waits in the accept queue; served (and ended) next
	first.Close()
	if got, err := get(dial(), 5*time.Second); err != nil || got != "true" {
		t.Fatalf("after the first closed: %q %v", got, err)
	}
}

// net/http's own error lines (a peer's failed TLS handshake, say) are
// logged at most once per kind per interval, whatever the peer address.
func TestErrorLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	s := New(http.NotFoundHandler(), Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	for i := range 1000 {
		s.srv.ErrorLog.Printf("http: TLS handshake error from 10.0.%d.%d:5555: EOF", i/256, i%256)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for 1000 handshake errors, want 1:\n%s", n, buf.String())
	}
}
