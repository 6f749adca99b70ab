package emulator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

type authError struct{ code, message string }

// authenticate verifies the request's SigV4 signature with the secret of its access
// key, as Route53 does, and returns the access key and the request body.
func (e *Emulator) authenticate(r *http.Request) (string, []byte, *authError) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return "", nil, &authError{"InvalidInput", "unreadable body"}
	}
	auth := r.Header.Get("Authorization")
	fields := map[string]string{}
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", nil, &authError{"MissingAuthenticationToken", "Missing Authentication Token"}
	}
	for _, f := range strings.Split(rest, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(f), "="); ok {
			fields[k] = v
		}
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 {
		return "", nil, &authError{"IncompleteSignature", "Authorization header requires a Credential with 5 parts"}
	}
	accessKey, region, service := scope[0], scope[2], scope[3]
	e.mu.Lock()
	secret, known := e.secrets[accessKey]
	e.mu.Unlock()
	if !known {
		return "", nil, &authError{"InvalidClientTokenId", "The security token included in the request is invalid."}
	}
	signedAt, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "", nil, &authError{"IncompleteSignature", "missing or malformed X-Amz-Date"}
	}
	// Re-sign a copy of the request carrying only the headers the client signed.
	check, _ := http.NewRequestWithContext(context.Background(), r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	check.Host = r.Host
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		if h == "host" {
			continue
		}
		if vs := r.Header.Values(h); len(vs) > 0 {
			check.Header[http.CanonicalHeaderKey(h)] = vs
		}
	}
	if strings.Contains(fields["SignedHeaders"], "content-length") {
		check.ContentLength = r.ContentLength
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: accessKey, SecretAccessKey: secret, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, check, hex.EncodeToString(sum[:]), service, region, signedAt); err != nil {
		return "", nil, &authError{"IncompleteSignature", err.Error()}
	}
	if signature(check.Header.Get("Authorization")) != fields["Signature"] {
		return "", nil, &authError{"SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."}
	}
	if time.Since(signedAt).Abs() > 15*time.Minute {
		return "", nil, &authError{"SignatureDoesNotMatch", "Signature expired"}
	}
	return accessKey, body, nil
}

func signature(auth string) string {
	_, sig, _ := strings.Cut(auth, "Signature=")
	return sig
}
