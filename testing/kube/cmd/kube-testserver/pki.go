package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pkiFiles holds the generated credentials and the files the apiserver
// reads them from.
type pkiFiles struct {
	caPEM []byte

	servingCertFile string
	servingKeyFile  string

	// serviceAccountKeyFile holds an RSA private key: the apiserver signs
	// service-account tokens with it and derives the verification key from it.
	serviceAccountKeyFile string

	tokenFile         string
	adminToken        string
	unprivilegedToken string
}

const (
	adminUser         = "admin"
	unprivilegedUser  = "unprivileged"
	unprivilegedGroup = "informerd:unprivileged"
)

func generatePKI(dir string) (*pkiFiles, error) {
	p := &pkiFiles{
		servingCertFile:       filepath.Join(dir, "apiserver.crt"),
		servingKeyFile:        filepath.Join(dir, "apiserver.key"),
		serviceAccountKeyFile: filepath.Join(dir, "service-account.key"),
		tokenFile:             filepath.Join(dir, "tokens.csv"),
	}

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "kube-testserver-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), p.caPEM, 0o644); err != nil {
		return nil, err
	}

	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	servingTemplate := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{
			"localhost",
			"kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP(apiServerServiceIP)},
	}
	servingDER, err := x509.CreateCertificate(rand.Reader, servingTemplate, caCert, servingKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	// The serving certificate file carries the chain up to the CA.
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: servingDER}), p.caPEM...)
	if err := os.WriteFile(p.servingCertFile, chain, 0o644); err != nil {
		return nil, err
	}
	if err := writePrivateKey(p.servingKeyFile, servingKey); err != nil {
		return nil, err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := writePrivateKey(p.serviceAccountKeyFile, saKey); err != nil {
		return nil, err
	}

	if p.adminToken, err = randomToken(); err != nil {
		return nil, err
	}
	if p.unprivilegedToken, err = randomToken(); err != nil {
		return nil, err
	}
	// Static token file: token,user,uid,"group1,group2".
	tokens := fmt.Sprintf("%s,%s,%s,%s\n%s,%s,%s,%s\n",
		p.adminToken, adminUser, "uid-admin", csvQuote("system:masters"),
		p.unprivilegedToken, unprivilegedUser, "uid-unprivileged", csvQuote(unprivilegedGroup))
	if err := os.WriteFile(p.tokenFile, []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func writePrivateKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

func randomSerial() *big.Int {
	limit := new(big.Int).Lsh(big.NewInt(1), 62)
	n, err := rand.Int(rand.Reader, limit)
	if err != nil {
		panic(err)
	}
	return n.Add(n, big.NewInt(1))
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
