// Package connect builds the provider client of an EdgeProvider from its spec and
// its Secret, for the operator and for the tools that read the providers as it does
// (kubectl tenantroute). Credentials are read into a struct that nothing logs or
// prints: conditions and events name the Secret and the key, never a value.
package connect

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/cloudflare"
	"github.com/tenantroute/tenantroute-operator/providers/route53"
)

// Keys of a Route53 credentials Secret.
const (
	SecretKeyAccessKeyID     = "access-key-id"
	SecretKeySecretAccessKey = "secret-access-key"
	SecretKeySessionToken    = "session-token"
)

// GetSecret reads a Secret: the operator reads through its cache, the plugin through
// the API server. A missing Secret is an error that apierrors.IsNotFound recognises.
type GetSecret func(ctx context.Context, namespace, name string) (*corev1.Secret, error)

// Credentials are what a provider client is built from; never logged.
type Credentials struct {
	token                           string
	accessKeyID, secretKey, session string
	// Version is the Secret's resourceVersion ("" without a Secret).
	Version string
}

// ReadCredentials reads an EdgeProvider's Secret from namespace. The values never
// leave the struct: conditions and events name the Secret and key, not their content.
// The reason is set when the Secret itself is wrong (missing, or a key missing).
func ReadCredentials(ctx context.Context, get GetSecret, namespace string, ep *v1.EdgeProvider) (Credentials, string, error) {
	name, keys := SecretRef(ep)
	if name == "" {
		return Credentials{}, "", nil // Route53 default credential chain
	}
	secret, err := get(ctx, namespace, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return Credentials{}, v1.ReasonSecretNotFound, fmt.Errorf("secret %s/%s not found", namespace, name)
		}
		return Credentials{}, "", fmt.Errorf("reading secret %s/%s: %w", namespace, name, err)
	}
	var missing []string
	value := func(key string, required bool) string {
		v := strings.TrimSpace(string(secret.Data[key]))
		if v == "" && required {
			missing = append(missing, key)
		}
		return v
	}
	creds := Credentials{Version: secret.ResourceVersion}
	if ep.Spec.Cloudflare != nil {
		creds.token = value(keys[0], true)
	} else {
		creds.accessKeyID, creds.secretKey, creds.session = value(keys[0], true), value(keys[1], true), value(keys[2], false)
	}
	if len(missing) > 0 {
		return Credentials{}, v1.ReasonSecretKeyMissing, fmt.Errorf("secret %s/%s has no key %s", namespace, name, strings.Join(missing, ", "))
	}
	return creds, "", nil
}

// SecretRef is the name of the EdgeProvider's Secret and the keys read from it.
func SecretRef(ep *v1.EdgeProvider) (string, []string) {
	switch {
	case ep.Spec.Cloudflare != nil:
		key := ep.Spec.Cloudflare.APITokenSecretRef.Key
		if key == "" {
			key = "token"
		}
		return ep.Spec.Cloudflare.APITokenSecretRef.Name, []string{key}
	case ep.Spec.Route53 != nil && ep.Spec.Route53.CredentialsSecretRef != nil:
		return ep.Spec.Route53.CredentialsSecretRef.Name, []string{SecretKeyAccessKeyID, SecretKeySecretAccessKey, SecretKeySessionToken}
	}
	return "", nil
}

// EdgeProvider builds the provider client of an EdgeProvider from its Secret in namespace,
// as the operator does, for tools that read the providers (kubectl tenantroute).
func EdgeProvider(ctx context.Context, get GetSecret, namespace string, ep *v1.EdgeProvider) (providers.Provider, error) {
	creds, _, err := ReadCredentials(ctx, get, namespace, ep)
	if err != nil {
		return nil, err
	}
	return New(ctx, ep, creds, nil)
}

// New builds the provider client of an EdgeProvider from its credentials; observe,
// if set, is told of every API call by operation and status code.
func New(ctx context.Context, ep *v1.EdgeProvider, c Credentials, observe func(operation, code string)) (providers.Provider, error) {
	if cfg := ep.Spec.Cloudflare; cfg != nil {
		o := cloudflare.Options{Name: ep.Name, APIToken: c.token, BaseURL: cfg.BaseURL, BatchSize: int(cfg.BatchSize),
			Observe: observe}
		if cfg.RateLimit != nil {
			o.RateLimit, o.RateWindow = int(cfg.RateLimit.Requests), cfg.RateLimit.Period.Duration
		}
		return cloudflare.New(o), nil
	}
	cfg := ep.Spec.Route53
	o := route53.Options{Name: ep.Name, Region: cfg.Region, Endpoint: cfg.Endpoint, AccessKeyID: c.accessKeyID,
		SecretAccessKey: c.secretKey, SessionToken: c.session, Observe: observe}
	if cfg.RateLimit != nil {
		o.RateLimit, o.RateWindow = int(cfg.RateLimit.Requests), cfg.RateLimit.Period.Duration
	}
	return route53.New(ctx, o)
}
