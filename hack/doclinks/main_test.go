package main

import (
	"io/fs"
	"reflect"
	"testing"
)

func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		"Isolation, 2026-11-27: bounds per tenant, the flood's clients capped": "isolation-2026-11-27-bounds-per-tenant-the-floods-clients-capped",
		"Several `herd up` replicas on one etcd":                               "several-herd-up-replicas-on-one-etcd",
		"Results (2026-11-27, 14:41), quiet machine":                           "results-2026-11-27-1441-quiet-machine",
		"Controller: the only writer of instances":                             "controller-the-only-writer-of-instances",
	} {
		if got := slug(text); got != want {
			t.Errorf("slug(%q) = %q, want %q", text, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	docs := map[string]string{
		"README.md": "See [the notes](docs/notes.md#second-part) and [bench](docs/bench/README.md).\n" +
			"[gone](docs/old.md), [bad anchor](docs/notes.md#third), [web](https://example.com/x.md)\n" +
			"```\n[in a fence](nowhere.md)\n```\n",
		"docs/notes.md": "# Notes\n## Second part\n## Second part\n[up](../README.md) [here](#second-part-1) [dir](bench/)\n",
		"docs/bench/README.md": "Figures: docs/notes.md, docs/bench/README.md; gone: docs/old.md.\n" +
			"[out](../../../etc/passwd)\n",
		"hack/tool.go": "// docs/notes.md says why; docs/moved.md is gone.\n",
		"image.png":    "docs/old.md",
	}
	var files []string
	for f := range docs {
		files = append(files, f)
	}
	read := func(f string) ([]byte, error) {
		if s, ok := docs[f]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	got := map[string]bool{}
	for _, p := range check(files, read) {
		got[p] = true
	}
	want := map[string]bool{
		"README.md:2: link docs/old.md: no such file docs/old.md":                                  true,
		"README.md:2: link docs/notes.md#third: no heading of docs/notes.md has the anchor #third": true,
		"docs/bench/README.md:1: docs/old.md: no such file":                                        true,
		"docs/bench/README.md:2: link ../../../etc/passwd: outside the repository":                 true,
		"hack/tool.go:1: docs/moved.md: no such file":                                              true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("check found\n%v\nwant\n%v", got, want)
	}
}
