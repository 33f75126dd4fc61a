package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// generateCerts makes a CA and a serving certificate for 127.0.0.1, ::1 and
// localhost, valid for a year.
func generateCerts() (caPEM []byte, serving tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, serving, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fake-apiserver-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, serving, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, serving, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, serving, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, serving, err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	serving = tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
	return caPEM, serving, nil
}

// Kubeconfig renders a kubeconfig for this server (context "fake").
func (s *Server) Kubeconfig() []byte {
	cluster := fmt.Sprintf("    server: %s\n", s.URL())
	if len(s.caPEM) > 0 {
		cluster += fmt.Sprintf("    certificate-authority-data: %s\n", base64.StdEncoding.EncodeToString(s.caPEM))
	}
	user := "  user: {}\n"
	if s.token != "" {
		user = fmt.Sprintf("  user:\n    token: %s\n", s.token)
	}
	return []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n" + cluster +
		"contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n" +
		"current-context: fake\nusers:\n- name: fake\n" + user)
}

// WriteKubeconfig writes the kubeconfig to path and, with TLS, the CA to
// ca.crt in the same directory.
func (s *Server) WriteKubeconfig(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if len(s.caPEM) > 0 {
		if err := os.WriteFile(filepath.Join(filepath.Dir(path), "ca.crt"), s.caPEM, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(path, s.Kubeconfig(), 0o600)
}
