//go:build !linux

package upstream

import "errors"

func privateRuntimeDirs(layout) error {
	return errors.New("upstream: runs on Linux only")
}
