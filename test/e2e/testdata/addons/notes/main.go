// Command notes shows a PersistentVolumeClaim at work: at start it appends a line naming its pod
// to /data/notes.log, reads the whole file back, and serves it on GET /. It is ready only once the
// write and the read back have succeeded, so a pod that restarts on the same volume shows the
// lines of the pods before it.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	dir := os.Getenv("DATA_DIR")
	if dir == "" {
		dir = "/data"
	}
	file := filepath.Join(dir, "notes.log")
	line := fmt.Sprintf("written by %s\n", os.Getenv("POD_NAME"))
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		log.Fatalf("open %s: %v", file, err)
	}
	if _, err := f.WriteString(line); err != nil {
		log.Fatalf("write %s: %v", file, err)
	}
	if err := f.Close(); err != nil {
		log.Fatalf("close %s: %v", file, err)
	}
	data, err := os.ReadFile(file)
	if err != nil || !strings.HasSuffix(string(data), line) {
		log.Fatalf("read %s back: %v (got %q)", file, err, data)
	}
	log.Printf("wrote and read back %s: %d lines", file, strings.Count(string(data), "\n"))

	http.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	http.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		data, err := os.ReadFile(file)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write(data)
	})
	log.Fatal(http.ListenAndServe(":8080", nil))
}
