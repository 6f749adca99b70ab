// Package kubectlplugin is `kubectl tenantroute` (cmd/kubectl-tenantroute): what a
// TenantRoute holds and where its traffic goes, the record changes the operator would
// make (computed with the operator's own code against the providers' records, without
// writing anything), and manual pinning to an edge.
package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

const usage = `kubectl tenantroute: see and steer TenantRoutes.

Usage:
  kubectl tenantroute status NAME [-n NAMESPACE]
      Hostnames and their state, the records each provider holds for the route,
      the active edge, every edge's health and the last failover.
  kubectl tenantroute plan [NAME] [-n NAMESPACE | -A] [-l SELECTOR] [--exit-code]
      The record changes the operator would make now, against the providers'
      current records; read-only. Without NAME, every TenantRoute of the
      namespace (-A: of the cluster, and the records of routes that no longer
      exist, searched in every EdgeProvider or, with -l, in those of the
      selected routes). --exit-code: exit 2 when there are changes or
      conflicts. Reading uses the providers' API quota the operator also uses.
  kubectl tenantroute pin NAME EDGE [--reason TEXT] [-n NAMESPACE]
      Keep the route on EDGE whatever its health (failover.mode Manual).
  kubectl tenantroute unpin NAME [-n NAMESPACE]
      Give the route back to automatic failover.

Flags:
`

// errChanges makes plan --exit-code exit with 2.
var errChanges = errors.New("the plan has changes")

// Main runs the plugin with args (without the program name) and returns its exit
// status: 0, 1 on error, 2 from plan --exit-code when there are changes.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errChanges):
		return 2
	case errors.Is(err, pflag.ErrHelp):
		return 0
	}
	printf(stderr, "error: %s\n", err)
	return 1
}

// cli is one invocation: the cluster, the namespace and the operator's settings.
type cli struct {
	out        io.Writer
	k8s        *kube
	namespace  string
	operatorNS string
	instance   string
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := pflag.NewFlagSet("kubectl-tenantroute", pflag.ContinueOnError)
	fs.SetOutput(out)
	// kubectl's own connection flags (--kubeconfig, --context, -n, --server, --token,
	// --as, ...), which kubectl hands to a plugin unchanged.
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&loading.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests.")
	overrides := &clientcmd.ConfigOverrides{}
	clientcmd.BindOverrideFlags(overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	c := &cli{out: out}
	fs.StringVar(&c.operatorNS, "operator-namespace", "tenantroute-system", "The operator's namespace, which holds the EdgeProviders' credential Secrets.")
	fs.StringVar(&c.instance, "instance", "default", "The operator's --instance: the ownership marker of its records.")
	all := fs.BoolP("all-namespaces", "A", false, "plan: every TenantRoute of the cluster.")
	selector := fs.StringP("selector", "l", "", "plan: only the TenantRoutes with these labels (key=value,...).")
	exitCode := fs.Bool("exit-code", false, "plan: exit with status 2 when there are changes or conflicts.")
	reason := fs.String("reason", "", "pin: why the route is pinned, recorded in spec.failover.reason.")
	fs.Usage = func() {
		fmt.Fprint(out, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	words := fs.Args()
	if len(words) == 0 {
		fs.Usage()
		return errors.New("no command given")
	}

	config := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, overrides)
	cfg, err := config.ClientConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if c.k8s, err = newKube(cfg); err != nil {
		return err
	}
	if c.namespace, _, err = config.Namespace(); err != nil {
		return err
	}

	cmd, rest := words[0], words[1:]
	want := func(n int, form string) error {
		if len(rest) != n {
			return fmt.Errorf("usage: kubectl tenantroute %s", form)
		}
		return nil
	}
	switch cmd {
	case "status":
		if err := want(1, "status NAME"); err != nil {
			return err
		}
		return c.status(ctx, rest[0])
	case "plan":
		if len(rest) > 1 || (len(rest) == 1 && (*all || *selector != "")) {
			return errors.New("usage: kubectl tenantroute plan NAME | plan [-A] [-l SELECTOR]")
		}
		scope := planScope{allNamespaces: *all, selector: *selector}
		if len(rest) == 1 {
			scope.name = rest[0]
		}
		changes, err := c.plan(ctx, scope)
		if err == nil && changes > 0 && *exitCode {
			return errChanges
		}
		return err
	case "pin":
		if err := want(2, "pin NAME EDGE [--reason TEXT]"); err != nil {
			return err
		}
		return c.pin(ctx, rest[0], rest[1], *reason)
	case "unpin":
		if err := want(1, "unpin NAME"); err != nil {
			return err
		}
		return c.unpin(ctx, rest[0])
	}
	fs.Usage()
	return fmt.Errorf("unknown command %q", cmd)
}

func (c *cli) table() *tabwriter.Writer { return tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0) }

func (c *cli) route(ctx context.Context, name string) (*v1.TenantRoute, error) {
	route, err := c.k8s.route(ctx, c.namespace, name)
	if err != nil {
		return nil, fmt.Errorf("TenantRoute %s/%s: %w", c.namespace, name, err)
	}
	return route, nil
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
