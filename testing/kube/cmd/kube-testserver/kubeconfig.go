package main

import (
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig with one cluster, one user (bearer
// token) and one context, all named "kube-testserver", selected as current.
func writeKubeconfig(path, server string, caPEM []byte, user, token string) error {
	const name = "kube-testserver"
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = server
	cluster.CertificateAuthorityData = caPEM
	cfg.Clusters[name] = cluster
	auth := clientcmdapi.NewAuthInfo()
	auth.Token = token
	cfg.AuthInfos[user] = auth
	kctx := clientcmdapi.NewContext()
	kctx.Cluster = name
	kctx.AuthInfo = user
	kctx.Namespace = "default"
	cfg.Contexts[name] = kctx
	cfg.CurrentContext = name
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}
