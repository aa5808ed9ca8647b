package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/kubebin"
)

func newKubeconfigCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "kubeconfig INSTANCE",
		Short: "Print a short-lived kubeconfig for an instance's Kubernetes API, reached through herd up",
		Long: `Print (or write with -o, mode 0600) a kubeconfig whose server is herd up's API, which forwards
to the instance's Kubernetes API server with herd's own credentials: the instance's API server is
never exposed. Its token is valid for this instance only, for ` + apiserver.DefaultKubeTokenTTL.String() + `, and until herd up
restarts. Each kubeconfig issued is recorded as a KubeconfigIssued event of the instance.`,
		Example: `  herd kubeconfig hello-7f9c2-abcde -o /tmp/hello.kubeconfig
  KUBECONFIG=/tmp/hello.kubeconfig kubectl get pods -A`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kc, err := g.issueKubeconfig(cmd, args[0])
			if err != nil {
				return err
			}
			if file == "" {
				_, err := g.out.Write(kc)
				return err
			}
			if err := client.WriteSecretFile(file, kc); err != nil {
				return fmt.Errorf("-o %s: %w", file, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "output-file", "o", "", "write the kubeconfig to this file (mode 0600) instead of printing it")
	return cmd
}

// issueKubeconfig asks herd up for a kubeconfig of instance and renders it.
func (g *globals) issueKubeconfig(cmd *cobra.Command, instance string) ([]byte, error) {
	c, err := g.client()
	if err != nil {
		return nil, err
	}
	kr, err := c.IssueKubeconfig(cmd.Context(), instance)
	if err != nil {
		return nil, err
	}
	return c.Kubeconfig(kr)
}

func newKubectlCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubectl INSTANCE -- KUBECTL-ARGS...",
		Short: "Run kubectl against an instance's Kubernetes API, through herd up",
		Long: `Run kubectl (the one ` + "`make kubernetes`" + ` builds) with a short-lived kubeconfig of the instance,
kept in a temporary file (mode 0600) that is removed afterwards. See herd kubeconfig.`,
		Example: `  herd kubectl hello-7f9c2-abcde -- get pods -A
  herd kubectl hello-7f9c2-abcde -- describe node`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("want the instance, then -- and kubectl's arguments: herd kubectl INSTANCE -- get pods -A")
			}
			kubectl, err := kubebin.Path("kubectl")
			if err != nil {
				return fmt.Errorf("%w (build it with make kubernetes)", err)
			}
			kc, err := g.issueKubeconfig(cmd, args[0])
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "herd-kubectl-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			file := filepath.Join(dir, "kubeconfig")
			if err := client.WriteSecretFile(file, kc); err != nil {
				return err
			}
			run := exec.CommandContext(cmd.Context(), kubectl, append([]string{"--kubeconfig", file}, args[1:]...)...)
			run.Stdin, run.Stdout, run.Stderr = cmd.InOrStdin(), g.out, g.errOut
			if err := run.Run(); err != nil {
				var exit *exec.ExitError
				if errors.As(err, &exit) {
					return fmt.Errorf("kubectl exited with status %d", exit.ExitCode())
				}
				return fmt.Errorf("kubectl: %w", err)
			}
			return nil
		},
	}
	return cmd
}
