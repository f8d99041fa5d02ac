package up

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/internal/tlsutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcd authentication for a TLS deployment. Every etcd of the deployment
// checks client certificates (mutual TLS); with authentication on, etcd
// also takes the certificate's common name as the user name (its
// --client-cert-auth), so a certificate from the CA is not enough: its
// name must be a user with a role. Each process's certificate is named
// after the process; the users are those names, without passwords (the
// certificate is the credential, so no secret is written anywhere):
//
//   - role "meridian": read and write on every key, for the bookies and
//     brokers (of the region, for a region's etcd; of every region, for
//     the global store);
//   - role "root" (etcd's administrator): the "client" certificate
//     (meridian admin, tests) and, on the global store, its members (the
//     witness moves the raft leadership to itself, which etcd allows root
//     only).
//
// A certificate of the CA with another name is refused every request
// ("permission denied").

// EtcdRole is the role the processes of a TLS deployment have in etcd.
const EtcdRole = "meridian"

// etcdClusters lists the deployment's etcd clusters: the global store
// (its members), then each region's etcd; for each, a client URL and the
// users with their roles.
func (p *Plan) etcdClusters() []etcdCluster {
	scheme := p.Options.scheme()
	global := etcdCluster{name: "global store", users: map[string]string{"root": "root", "client": "root"}}
	regional := map[string]*etcdCluster{}
	var order []string
	for _, ps := range p.Procs {
		switch ps.Role {
		case "global-etcd", "witness":
			global.urls = append(global.urls, scheme+ps.Addr)
			global.users[ps.Name] = "root"
		case "etcd":
			regional[ps.Region] = &etcdCluster{name: ps.Name, urls: []string{scheme + ps.Addr},
				users: map[string]string{"root": "root", "client": "root"}}
			order = append(order, ps.Region)
		}
	}
	for _, ps := range p.Procs {
		if ps.Role != "broker" && ps.Role != "bookie" {
			continue
		}
		if _, ok := global.users[ps.Name]; !ok {
			global.users[ps.Name] = EtcdRole
		}
		if c := regional[ps.Region]; c != nil {
			c.users[ps.Name] = EtcdRole
		}
	}
	out := []etcdCluster{global}
	for _, r := range order {
		out = append(out, *regional[r])
	}
	return out
}

type etcdCluster struct {
	name  string
	urls  []string
	users map[string]string // user → role
}

// enableEtcdAuth turns authentication on in every etcd of the deployment,
// with a user for each process of the plan.
func (d *Deployment) enableEtcdAuth(ctx context.Context) error {
	src, err := tlsutil.NewSource(ClientFiles(d.Plan.Options.DataDir))
	if err != nil {
		return err
	}
	for _, c := range d.Plan.etcdClusters() {
		if err := enableAuth(ctx, c, src); err != nil {
			return fmt.Errorf("up: etcd authentication on %s: %w", c.name, err)
		}
	}
	return nil
}

func enableAuth(ctx context.Context, c etcdCluster, src *tlsutil.Source) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.urls, DialTimeout: 5 * time.Second, TLS: src.ClientConfig(""),
		Context: ctx, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	// A just-started cluster may still be electing its leader: ask
	// again until it answers.
	for {
		if _, err = cli.AuthStatus(ctx); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Every step is idempotent (etcd ignores a role granted again and an
	// enable of enabled authentication), so an `up` on a directory whose
	// etcds have authentication on already adds only what is new (a
	// process added to the plan).
	if _, err := cli.RoleAdd(ctx, EtcdRole); err != nil && !exists(err) {
		return fmt.Errorf("role %s: %w", EtcdRole, err)
	}
	// "\x00" to "\x00": every key (etcd's open-ended range from the
	// smallest key).
	if _, err := cli.RoleGrantPermission(ctx, EtcdRole, "\x00", "\x00", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		return fmt.Errorf("role %s: %w", EtcdRole, err)
	}
	for user, role := range c.users {
		if _, err := cli.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !exists(err) {
			return fmt.Errorf("user %s: %w", user, err)
		}
		if _, err := cli.UserGrantRole(ctx, user, role); err != nil {
			return fmt.Errorf("user %s: role %s: %w", user, role, err)
		}
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return err
	}
	return nil
}

func exists(err error) bool {
	return errors.Is(err, rpctypes.ErrRoleAlreadyExist) || errors.Is(err, rpctypes.ErrUserAlreadyExist)
}

// waitWitnessLeads waits (up to timeout) until the global store's witness
// holds the raft leadership, which it takes soon after the members start
// (--prefer-leader). While the leadership moves, the global store answers
// requests late or with "request timed out": a broker starting then
// failed its first registrations (seen in CI), so bookies and brokers
// start only after the move. Past timeout it logs and goes on.
func (d *Deployment) waitWitnessLeads(ctx context.Context, timeout time.Duration) {
	var w ProcSpec
	for _, ps := range d.Plan.Procs {
		if ps.Role == "witness" {
			w = ps
		}
	}
	if w.Name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := d.Plan.Options.scheme() + w.Addr
	cc := clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Context: ctx, Logger: zap.NewNop()}
	if d.Plan.Options.TLS {
		src, err := tlsutil.NewSource(ClientFiles(d.Plan.Options.DataDir))
		if err != nil {
			d.log.Warn("up: cannot check the global store's leader", "err", err)
			return
		}
		cc.TLS = src.ClientConfig("")
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		d.log.Warn("up: cannot check the global store's leader", "err", err)
		return
	}
	defer cli.Close()
	for {
		st, err := cli.Status(ctx, url)
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return
		}
		select {
		case <-ctx.Done():
			d.log.Warn("up: the witness did not take the global store's leadership in time; starting anyway", "timeout", timeout)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
