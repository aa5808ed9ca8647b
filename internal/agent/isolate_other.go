//go:build !linux

package agent

import (
	"errors"
	"log/slog"

	"herd.dev/herd/internal/agent/cgroups"
)

func isolate(string, *slog.Logger) ([]cgroups.Hierarchy, error) {
	return nil, errors.New("herd-agent runs on Linux only")
}
