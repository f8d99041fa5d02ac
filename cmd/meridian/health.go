package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// meridian health: probe a process's /readyz (or /healthz, /status.html)
// the way a container's HEALTHCHECK or a load balancer would — a scratch
// image has no curl. Exit status 0 when the endpoint answers 200.
func newHealthCmd() *cobra.Command {
	var url, check, caFile string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Probe a broker's or bookie's /readyz (or --check healthz): exit 0 when it answers 200",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch check {
			case "readyz", "healthz", "status.html":
			default:
				return fmt.Errorf("--check %q: want readyz, healthz or status.html", check)
			}
			client := &http.Client{Timeout: timeout}
			if caFile != "" {
				pem, err := os.ReadFile(caFile)
				if err != nil {
					return err
				}
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					return fmt.Errorf("%s: no certificate in it", caFile)
				}
				client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
			}
			resp, err := client.Get(strings.TrimSuffix(url, "/") + "/" + check)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			fmt.Fprint(cmd.OutOrStdout(), strings.TrimSpace(string(body))+"\n")
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s/%s answered %s", url, check, resp.Status)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8080", "the process's HTTP address: a broker's admin URL or a bookie's metrics URL")
	cmd.Flags().StringVar(&check, "check", "readyz", "readyz, healthz or status.html")
	cmd.Flags().StringVar(&caFile, "tls-trust-certs", "", "CA certificate file for an https URL")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	return cmd
}
