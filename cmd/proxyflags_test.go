package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/tenantroute/tenantroute-operator/proxy"
)

// An IPv6 client prefix outside 1-128 is refused at start with the value named,
// rather than replaced by the default without a word.
func TestIPv6ClientPrefixOutOfRangeIsRefused(t *testing.T) {
	parse := func(args ...string) (proxy.Options, error) {
		fs := flag.NewFlagSet("manager", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var o proxy.Options
		bindProxyFlags(fs, &o, &proxy.ChainOptions{})
		return o, fs.Parse(args)
	}
	if o, err := parse(); err != nil || o.IPv6ClientPrefix != proxy.DefaultIPv6ClientPrefix {
		t.Errorf("no flag: %d %v, want the default %d", o.IPv6ClientPrefix, err, proxy.DefaultIPv6ClientPrefix)
	}
	if o, err := parse("--ipv6-client-prefix=56"); err != nil || o.IPv6ClientPrefix != 56 {
		t.Errorf("--ipv6-client-prefix=56: %d %v", o.IPv6ClientPrefix, err)
	}
	for _, bad := range []string{"0", "129", "-1", "64x"} {
		if _, err := parse("--ipv6-client-prefix=" + bad); err == nil {
			t.Errorf("--ipv6-client-prefix=%s was taken", bad)
		}
	}
}

// The lookup endpoint's URL is checked at start; a trailing slash, which made every
// lookup ask //v1/routes, is dropped.
func TestLookupURLIsCheckedAtStart(t *testing.T) {
	for in, want := range map[string]string{
		"http://tenantroute-lookup.tenantroute-system.svc:8082":  "http://tenantroute-lookup.tenantroute-system.svc:8082",
		"http://tenantroute-lookup.tenantroute-system.svc:8082/": "http://tenantroute-lookup.tenantroute-system.svc:8082",
		"https://lookup.example.com/tenantroute/":                "https://lookup.example.com/tenantroute",
	} {
		if got, err := lookupBaseURL(in); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"tenantroute-lookup:8082", "ftp://lookup", "http://", "http://lookup:8082/?x=1", "http://lookup#f"} {
		if got, err := lookupBaseURL(bad); err == nil {
			t.Errorf("%s was taken as %q", bad, got)
		}
	}
}

// An installation's name holds no slash: with one, an installation would take
// another's ownership markers for its own ("prod" and "prod/eu") and sweep them.
func TestInstanceNameHoldsNoSlash(t *testing.T) {
	for _, ok := range []string{"default", "prod-eu", "a", "Prod", "prod.eu", "prod_eu"} {
		if _, err := instanceName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "prod/eu", "prod eu", "prod\neu", strings.Repeat("a", 64)} {
		if _, err := instanceName(bad); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}
