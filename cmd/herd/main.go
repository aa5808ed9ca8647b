// Command herd runs applications as fleets of immutable one-node Kubernetes clusters.
package main

import (
	"os"

	"herd.dev/herd/internal/cli"
)

func main() {
	os.Exit(cli.Execute())
}
