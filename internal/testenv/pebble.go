package testenv

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Pebble is Let's Encrypt's ACME test server, built from its Go module (hack/tools),
// with its challenge test server as the DNS server that resolves every name to
// 127.0.0.1: validations really connect to the proxy's listeners.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// APIRoots trusts Pebble's own HTTPS API; IssuerRoots the certificates it issues.
	APIRoots, IssuerRoots *x509.CertPool
	orders, orderRequests atomic.Int64
}

// PebbleOptions say where Pebble validates (the proxy's plain and TLS ports) and how
// long its certificates live.
type PebbleOptions struct {
	HTTPPort, TLSPort int
	Validity          time.Duration
	// Blocked names are refused at the order (a CA's policy).
	Blocked []string
	// Listen and Management are the ACME API's and the management API's addresses.
	Listen, Management string
}

// WritePebbleConfig writes Pebble's configuration and its API's certificate into
// dir; it returns the configuration file and the roots that trust the API.
func WritePebbleConfig(dir string, o PebbleOptions) (string, *x509.CertPool, error) {
	certFile, keyFile, apiRoots, err := WriteSelfSigned(dir, "api", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return "", nil, err
	}
	validity := o.Validity
	if validity == 0 {
		validity = 90 * 24 * time.Hour
	}
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress": o.Listen, "managementListenAddress": o.Management,
		"certificate": certFile, "privateKey": keyFile,
		"httpPort": o.HTTPPort, "tlsPort": o.TLSPort,
		"ocspResponderURL": "", "externalAccountBindingRequired": false,
		"keyAlgorithm": "ecdsa", "domainBlocklist": o.Blocked,
		"profiles": map[string]any{"default": map[string]any{
			"description": "test", "validityPeriod": int(validity.Seconds())}},
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	return cfgFile, apiRoots, os.WriteFile(cfgFile, b, 0o600)
}

// Orders is how many orders Pebble has accepted.
func (p *Pebble) Orders() int64 { return p.orders.Load() }

// OrderRequests is how many new orders were asked for, refused ones included.
func (p *Pebble) OrderRequests() int64 { return p.orderRequests.Load() }

// ToolBinary returns bin/<name>, building it from hack/tools' module when missing.
func ToolBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	root := RepoRoot()
	bin := filepath.Join(root, "bin", name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = filepath.Join(root, "hack", "tools")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s from hack/tools: %v\n%s", name, err, out)
	}
	return bin
}

// FreePort returns a port nothing listens on now.
func FreePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// StartPebble runs Pebble and its DNS server until the test ends. Their ports are
// picked free and then bound by the child processes, so another process may take
// one in between (go test runs packages side by side): a start whose process exits
// is retried on new ports, and a failure says what the process printed.
func StartPebble(t testing.TB, o PebbleOptions) *Pebble {
	t.Helper()
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var p *Pebble
		if p, err = startPebble(t, o); err == nil {
			return p
		}
		t.Logf("starting pebble, attempt %d: %v", attempt, err)
	}
	t.Fatalf("pebble did not start: %v", err)
	return nil
}

func startPebble(t testing.TB, o PebbleOptions) (*Pebble, error) {
	pebble := ToolBinary(t, "pebble", "github.com/letsencrypt/pebble/v2/cmd/pebble")
	challtest := ToolBinary(t, "pebble-challtestsrv", "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv")
	dir := t.TempDir()
	dnsPort, dnsMgmt := FreePort(t), FreePort(t)
	dns := startLogged(t, exec.Command(challtest, "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "",
		"-dnsserver", "127.0.0.1:"+strconv.Itoa(dnsPort), "-management", "127.0.0.1:"+strconv.Itoa(dnsMgmt),
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""), "challtestsrv", nil)
	// The management API answers once the DNS server is bound (it starts last).
	probe := &http.Client{Timeout: 5 * time.Second}
	if err := dns.waitFor(func() error {
		resp, err := probe.Get(fmt.Sprintf("http://127.0.0.1:%d/", dnsMgmt))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}); err != nil {
		dns.stop()
		return nil, err
	}

	apiPort, mgmtPort := FreePort(t), FreePort(t)
	o.Listen, o.Management = "127.0.0.1:"+strconv.Itoa(apiPort), "127.0.0.1:"+strconv.Itoa(mgmtPort)
	cfgFile, apiRoots, err := WritePebbleConfig(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	p := &Pebble{Directory: "https://" + o.Listen + "/dir", APIRoots: apiRoots}
	cmd := exec.Command(pebble, "-config", cfgFile, "-dnsserver", "127.0.0.1:"+strconv.Itoa(dnsPort))
	// No random wait before validating, and no nonces refused on purpose: the tests
	// count orders, and a retried order would count twice.
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
	proc := startLogged(t, cmd, "pebble", func(line string) {
		switch {
		case strings.Contains(line, "Added order"):
			p.orders.Add(1)
		case strings.Contains(line, "POST /order-plz"):
			p.orderRequests.Add(1)
		}
	})

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: apiRoots}}}
	err = proc.waitFor(func() error {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/roots/0", mgmtPort))
		if err != nil {
			return err
		}
		pemBytes, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		p.IssuerRoots = x509.NewCertPool()
		if resp.StatusCode != http.StatusOK || !p.IssuerRoots.AppendCertsFromPEM(pemBytes) {
			return fmt.Errorf("root certificate: %s", resp.Status)
		}
		// The ACME API listens after the management one.
		resp, err = client.Get(p.Directory)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	if err != nil {
		proc.stop()
		dns.stop()
		return nil, err
	}
	return p, nil
}

// process is a child started by startLogged.
type process struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when it has exited and its output is read
	mu     sync.Mutex
	tail   []string // its last lines of output
}

// waitFor polls ready until it succeeds, the process exits (an error with its last
// lines) or 30 s pass.
func (p *process) waitFor(ready func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			p.mu.Lock()
			defer p.mu.Unlock()
			return fmt.Errorf("%s exited (%v): %s", p.name, p.cmd.ProcessState, strings.Join(p.tail, " | "))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready in 30s: %w", p.name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *process) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// startLogged starts cmd, sends its output to the test log (and to each, line by
// line) and stops it when the test ends.
func startLogged(t testing.TB, cmd *exec.Cmd, name string, each func(string)) *process {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if each != nil {
				each(line)
			}
			if os.Getenv("TEST_VERBOSE_TOOLS") != "" {
				fmt.Fprintf(os.Stderr, "%s: %s\n", name, line)
			}
			p.mu.Lock()
			if p.tail = append(p.tail, line); len(p.tail) > 5 {
				p.tail = p.tail[1:]
			}
			p.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(p.stop)
	return p
}

// WriteSelfSigned writes an ECDSA P-256 certificate for names and ips as
// dir/<base>.crt and dir/<base>.key, valid for a week, and returns the pool that
// trusts it.
func WriteSelfSigned(dir, base string, names []string, ips []net.IP) (certFile, keyFile string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(7 * 24 * time.Hour),
		DNSNames: names, IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool, nil
}
