package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// mountedCerts are the certificates of mounted TLS Secrets, by the names they cover.
// The set is replaced whole when the directory changes; a pair that does not load
// keeps its previous certificate rather than leaving its hostnames without one.
type mountedCerts struct {
	dir   string
	set   atomic.Pointer[certSet]
	stamp string
}

type certSet struct {
	exact    map[string]*tls.Certificate
	wildcard map[string]*tls.Certificate // "*.example.com" under "example.com"
	bySource map[string]*tls.Certificate // by the directory the pair came from
}

func loadMountedCerts(dir string) (*mountedCerts, error) {
	s := &mountedCerts{dir: dir}
	if _, err := pairDirs(dir); err != nil {
		return nil, err
	}
	return s, s.reload()
}

// match returns the certificate for name: an exact SAN first, then a wildcard one
// label up (a wildcard never covers a deeper name or the bare domain). An expired one
// is no match, so that ACME, if on, takes the name over.
func (s *mountedCerts) match(name string) *tls.Certificate {
	set := s.set.Load()
	c := set.exact[name]
	if c == nil {
		if i := strings.IndexByte(name, '.'); i > 0 {
			c = set.wildcard[name[i+1:]]
		}
	}
	if c == nil || time.Now().After(c.Leaf.NotAfter) {
		return nil
	}
	return c
}

// pairDirs lists where tls.crt/tls.key pairs are: the directory and each directory
// directly in it (Kubernetes mounts a Secret as a directory; its ..data entries are
// the kubelet's and skipped).
func pairDirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the certificate directory: %w", err)
	}
	out := []string{dir}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			out = append(out, p)
		}
	}
	return out, nil
}

// fingerprint changes when any pair's files change (the kubelet swaps a symlink, so
// the files' modification times and sizes follow it).
func fingerprint(dirs []string) string {
	var b strings.Builder
	for _, d := range dirs {
		for _, f := range []string{"tls.crt", "tls.key"} {
			if st, err := os.Stat(filepath.Join(d, f)); err == nil {
				fmt.Fprintf(&b, "%s/%s:%d:%d;", d, f, st.ModTime().UnixNano(), st.Size())
			}
		}
	}
	return b.String()
}

// reload reads the directory again if anything in it changed.
func (s *mountedCerts) reload() error {
	dirs, err := pairDirs(s.dir)
	if err != nil {
		return err
	}
	stamp := fingerprint(dirs)
	if stamp == s.stamp {
		return nil
	}
	prev := s.set.Load()
	next := &certSet{exact: map[string]*tls.Certificate{}, wildcard: map[string]*tls.Certificate{}, bySource: map[string]*tls.Certificate{}}
	var errs []error
	for _, d := range dirs {
		crt, key := filepath.Join(d, "tls.crt"), filepath.Join(d, "tls.key")
		if _, err := os.Stat(crt); err != nil {
			continue
		}
		c, err := loadPair(crt, key)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
			if prev != nil && prev.bySource[d] != nil {
				c = prev.bySource[d] // keep serving the last good pair
			} else {
				continue
			}
		}
		next.bySource[d] = c
		for _, name := range c.Leaf.DNSNames {
			name = strings.ToLower(name)
			if rest, ok := strings.CutPrefix(name, "*."); ok {
				next.wildcard[rest] = c
			} else {
				next.exact[name] = c
			}
		}
	}
	s.set.Store(next)
	s.stamp = stamp
	if len(errs) > 0 {
		certReloadErrors.Inc()
		return errors.Join(errs...)
	}
	return nil
}

func loadPair(crt, key string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil, err
	}
	if time.Now().After(leaf.NotAfter) {
		return nil, fmt.Errorf("the certificate expired at %s", leaf.NotAfter.Format(time.RFC3339))
	}
	c.Leaf = leaf
	return &c, nil
}
