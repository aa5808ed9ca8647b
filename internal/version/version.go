// Package version holds herd's version, stamped at build time by the Makefile.
package version

// Version is set with -ldflags "-X herd.dev/herd/internal/version.Version=...".
var Version = "dev"
