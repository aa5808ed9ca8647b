//go:build !linux

package upstream

import (
	"context"
	"log/slog"
)

func forgetGonePodsHere(context.Context, *slog.Logger) error { return nil }
