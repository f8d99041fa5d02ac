package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/tools/testutil"
)

// Requirement (issue 30, item 5): the admin listener's timeouts and
// connection cap are settings of the broker and the standalone
// (--admin-idle-timeout, --admin-max-connections, ...), and reach the
// listener of a real process: with --admin-idle-timeout 1s a keep-alive
// connection left idle is closed in about a second (the default keeps
// it 30 s), and with --admin-max-connections 2 a third connection is
// not served until one of the two closes.
func TestAdminListenerFlagsReachTheServer(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--admin-idle-timeout", "1s", "--admin-max-connections", "2")
	host := strings.TrimPrefix(s.AdminURL, "http://")
	http.DefaultClient.CloseIdleConnections() // WaitReady's connection
	time.Sleep(1500 * time.Millisecond)       // closed by the server meanwhile
	get := func(c net.Conn, br *bufio.Reader, wait time.Duration) error {
		fmt.Fprintf(c, "GET /admin/v2/tenants HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			return fmt.Errorf("answer %s (close %v), want a kept-alive 200", resp.Status, resp.Close)
		}
		return nil
	}
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}

	c1, br1 := dial()
	c2, br2 := dial()
	if err := get(c1, br1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := get(c2, br2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c3, br3 := dial() // completes in the kernel's accept queue
	if err := get(c3, br3, 300*time.Millisecond); err == nil {
		t.Fatal("a third connection was served past --admin-max-connections 2")
	}
	// c1 and c2 idle: the server closes them after about 1 s, and then
	// serves c3.
	start := time.Now()
	c1.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br1.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive: read %v, want EOF", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("an idle keep-alive was closed after %v with --admin-idle-timeout 1s", el)
	}
	c3.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br3, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the third connection once the others closed: %v %v", resp, err)
	}
	resp.Body.Close()
}
