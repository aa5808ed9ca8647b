// Command hello is herd's example web app. It answers GET / with a JSON object naming the
// instance (the one-node cluster's node), the pod and the revision that served the request, so
// that traffic through herd's load balancer shows which instance and revision answered:
//
//	{"instance": "hello-7f9c2-abcde", "pod": "hello-5d8f6b7c9-xk2lp", "revision": "v1", "hostname": "hello-5d8f6b7c9-xk2lp"}
//
// GET /healthz answers 200 "ok" while the server runs. Environment:
//
//	PORT          port to listen on. Default: 8080.
//	NODE_NAME     the instance's node name (downward API spec.nodeName). Default: empty.
//	POD_NAME      the pod's name (downward API metadata.name). Default: empty.
//	REVISION      the app's revision, set in the manifest or baked into the image. Default: "dev".
//	FAIL_PERCENT  share of GET / requests answered 500, from 0 to 100, for canary tests. Default: 0.
//	DELAY         extra latency added to every GET / response, a Go duration ("50ms"). Default: 0.
//	UPSTREAM      a URL that GET /upstream fetches and relays, to show workloads calling each other
//	              by Service name through the cluster's DNS ("http://api.shop.svc:8080/").
//	              Default: none (GET /upstream answers 404).
//
// On SIGTERM it stops accepting connections and finishes the requests in flight. With -version it
// prints "hello REVISION" and exits: the image has no shell, so this is a command that kubectl exec
// can run in the container to show that exec works. With -get URL it makes one GET from inside the
// container, prints the answer's status line and body, and exits (1, saying why, when no answer
// came): how a test calls a URL of its choice from a pod, through the pod's own DNS and network
// (`kubectl exec POD -- /hello -get http://api.herd.internal/`), in an image without curl; -host
// sends another Host header than the URL's, to call a load balancer's address as a name.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// config is the app's environment, parsed.
type config struct {
	port        string
	instance    string
	pod         string
	revision    string
	hostname    string
	failPercent float64
	delay       time.Duration
	upstream    string
}

func loadConfig(getenv func(string) string) (config, error) {
	c := config{
		port:     getenv("PORT"),
		instance: getenv("NODE_NAME"),
		pod:      getenv("POD_NAME"),
		revision: getenv("REVISION"),
		upstream: getenv("UPSTREAM"),
	}
	if c.port == "" {
		c.port = "8080"
	}
	if c.revision == "" {
		c.revision = "dev"
	}
	if s := getenv("FAIL_PERCENT"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || f > 100 {
			return c, fmt.Errorf("FAIL_PERCENT=%q: want a number from 0 to 100", s)
		}
		c.failPercent = f
	}
	if s := getenv("DELAY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return c, fmt.Errorf("DELAY=%q: want a duration such as 50ms", s)
		}
		c.delay = d
	}
	c.hostname, _ = os.Hostname()
	return c, nil
}

// reply is the body of GET /.
type reply struct {
	Instance string `json:"instance"`
	Pod      string `json:"pod"`
	Revision string `json:"revision"`
	Hostname string `json:"hostname"`
	Error    string `json:"error,omitempty"`
}

// handler serves / and /healthz. fail decides whether a request gets an injected 500.
func handler(c config, fail func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /upstream", func(w http.ResponseWriter, r *http.Request) {
		if c.upstream == "" {
			http.Error(w, "no UPSTREAM is set", http.StatusNotFound)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.upstream, nil)
		if err == nil {
			var resp *http.Response
			if resp, err = http.DefaultClient.Do(req); err == nil {
				defer resp.Body.Close()
				w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
				w.WriteHeader(resp.StatusCode)
				_, _ = io.Copy(w, io.LimitReader(resp.Body, 1<<20))
				return
			}
		}
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if c.delay > 0 {
			select {
			case <-time.After(c.delay):
			case <-r.Context().Done():
				return
			}
		}
		body := reply{Instance: c.instance, Pod: c.pod, Revision: c.revision, Hostname: c.hostname}
		status := http.StatusOK
		if fail() {
			status = http.StatusInternalServerError
			body.Error = fmt.Sprintf("injected failure (FAIL_PERCENT=%g)", c.failPercent)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	})
	return mux
}

// get GETs url and writes the answer's status line and body (at most 1 MiB) to out. Any answer is
// written, a 403 or a 500 too; only a call that got no answer is an error. A host other than ""
// is sent as the Host header.
func get(url, host string, out io.Writer) error {
	client := &http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	fmt.Fprintln(out, resp.Status)
	_, err = io.Copy(out, io.LimitReader(resp.Body, 1<<20))
	return err
}

func main() {
	version := flag.Bool("version", false, `print "hello REVISION" and exit`)
	getURL := flag.String("get", "", "GET this URL, print the answer's status line and body, and exit")
	getHost := flag.String("host", "", "with -get: the Host header to send (default: the URL's host)")
	flag.Parse()
	if *getURL != "" {
		if err := get(*getURL, *getHost, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "hello:", err)
			os.Exit(1)
		}
		return
	}
	c, err := loadConfig(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	if *version {
		fmt.Println("hello", c.revision)
		return
	}
	fail := func() bool { return c.failPercent > 0 && rand.Float64()*100 < c.failPercent }
	srv := &http.Server{
		Addr:              ":" + c.port,
		Handler:           handler(c, fail),
		ReadHeaderTimeout: 10 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Printf("hello: serving on :%s (instance %q, revision %q, fail %g%%)", c.port, c.instance, c.revision, c.failPercent)
	select {
	case err := <-errc:
		log.Fatal(err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
