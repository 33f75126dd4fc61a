// Command kubectl is the real kubectl, built from the k8s.io/kubectl module at
// the version testing/kube pins (v0.37.2, the client of kube-apiserver
// v1.37.2). Its main is k8s.io/kubernetes/cmd/kubectl/kubectl.go of that
// release (Apache-2.0, The Kubernetes Authors), which cannot be imported, being
// package main. Build it with testing/kube/kubectl (out/kubectl, rebuilt when
// stale); see testing/kube/README.md.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// Client auth plugins (exec and OIDC), as in kubectl itself.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	// The verbosity is set before the command is built (flags are parsed
	// later, in cli.RunNoErrOutput), as kubectl does.
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
