package host

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Peers prove who they are with mutual TLS on the metadata endpoint: both
// sides present a certificate signed by the cluster's CA, and a host
// believes a peer only when the peer's certificate names the peer it asked
// for. A certificate names a host by a URI SAN, custody://peer/NAME (NAME
// path-escaped); PeerURI makes one.
//
// With metadata.tls set, the CA and this host's certificate and key are
// read from the files it names. Without it (one machine), custody keeps a
// CA of its own in the state directory (state_dir/ca, 0700, key 0600),
// made by the first host that needs it, and each host issues itself a
// certificate from it at start. Every host of one user that shares the
// state directory trusts the others, and nothing else.

// peerURIScheme and peerURIHost make the URI SAN that names a host.
const (
	peerURIScheme = "custody"
	peerURIHost   = "peer"
	// leafLife is how long a host's self-issued certificate is valid.
	leafLife = 30 * 24 * time.Hour
	// caLife is how long a generated CA is valid.
	caLife = 10 * 365 * 24 * time.Hour
)

// PeerURI is the URI SAN that names host name in its certificate.
func PeerURI(name string) *url.URL {
	return &url.URL{Scheme: peerURIScheme, Host: peerURIHost, Path: "/" + url.PathEscape(name)}
}

// certName is the host a certificate names, or "" when it names none (or
// more than one).
func certName(c *x509.Certificate) string {
	name := ""
	for _, u := range c.URIs {
		if u.Scheme != peerURIScheme || u.Host != peerURIHost || len(u.EscapedPath()) < 2 {
			continue
		}
		n, err := url.PathUnescape(u.EscapedPath()[1:])
		if err != nil || (name != "" && n != name) {
			return ""
		}
		name = n
	}
	return name
}

// peerTrust is a host's identity and the CA it trusts.
type peerTrust struct {
	name string
	cert tls.Certificate
	ca   *x509.CertPool
}

// loadTrust reads the configured CA and identity, or makes the one-machine
// default.
func loadTrust(cfg *Config) (*peerTrust, error) {
	t := cfg.Metadata.TLS
	if t.CA == "" && t.Cert == "" && t.Key == "" {
		return localTrust(cfg.StateDir, cfg.Name)
	}
	caPEM, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, fmt.Errorf("config: metadata.tls.ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("config: metadata.tls.ca: %s holds no PEM certificate", t.CA)
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("config: metadata.tls.cert and key: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("config: metadata.tls.cert: %w", err)
	}
	if n := certName(leaf); n != cfg.Name {
		return nil, fmt.Errorf("config: metadata.tls.cert: names host %q, not this host %q; issue it with the URI SAN %s", n, cfg.Name, PeerURI(cfg.Name))
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("config: metadata.tls.cert: not signed by metadata.tls.ca: %w", err)
	}
	return &peerTrust{name: cfg.Name, cert: cert, ca: pool}, nil
}

// localTrust loads (or, the first time, makes) the CA in stateDir/ca and
// issues this host a certificate from it.
func localTrust(stateDir, name string) (*peerTrust, error) {
	dir := filepath.Join(stateDir, "ca")
	if err := privateDir(stateDir); err != nil {
		return nil, fmt.Errorf("config: state_dir: %w", err)
	}
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	caCert, caKey, err := loadOrMakeCA(dir)
	if err != nil {
		return nil, err
	}
	cert, err := issue(name, caCert, caKey)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &peerTrust{name: name, cert: cert, ca: pool}, nil
}

// loadOrMakeCA reads dir/ca.pem and dir/ca-key.pem, making them first when
// missing; a lock keeps two hosts starting at once from making two CAs.
func loadOrMakeCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("local CA in %s: %w", dir, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, nil, fmt.Errorf("local CA in %s: lock: %w", dir, err)
	}
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	certPEM, cerr := os.ReadFile(certPath)
	keyPEM, kerr := os.ReadFile(keyPath)
	if errors.Is(cerr, os.ErrNotExist) && errors.Is(kerr, os.ErrNotExist) {
		if certPEM, keyPEM, err = makeCA(); err != nil {
			return nil, nil, fmt.Errorf("local CA in %s: %w", dir, err)
		}
		if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
			return nil, nil, fmt.Errorf("local CA in %s: %w", dir, err)
		}
		if err := os.WriteFile(certPath, certPEM, 0o600); err != nil {
			return nil, nil, fmt.Errorf("local CA in %s: %w", dir, err)
		}
	} else if err := errors.Join(cerr, kerr); err != nil {
		return nil, nil, fmt.Errorf("local CA in %s: %w; remove the directory to make a new CA", dir, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("local CA in %s: %w; remove the directory to make a new CA", dir, err)
	}
	caCert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("local CA in %s: %w", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("local CA in %s: the key is not ECDSA; remove the directory to make a new CA", dir)
	}
	return caCert, key, nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// makeCA makes a self-signed CA certificate and its key, as PEM.
func makeCA() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "custody local CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// issue makes a certificate naming host name, for both ends of TLS.
func issue(name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	sn, err := serial()
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name},
		URIs:         []*url.URL{PeerURI(name)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue certificate for host %q: %w", name, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// serverTLS is the metadata endpoint's side: it presents this host's
// certificate and accepts only clients with a certificate from the CA.
func (t *peerTrust) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{t.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    t.ca,
	}
}

// clientTLS is a fetch's side: it presents this host's certificate and
// believes a server only when its certificate is from the CA and names
// want.
func (t *peerTrust) clientTLS(want string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{t.cert},
		// The standard check matches DNS names and addresses; peers are
		// named by URI SAN, so VerifyConnection does the whole check.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("peer presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: t.ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("peer certificate is not from this cluster's CA: %w", err)
			}
			if n := certName(leaf); n != want {
				return fmt.Errorf("peer certificate names host %.256q, not %.256q", n, want)
			}
			return nil
		},
	}
}
