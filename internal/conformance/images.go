// The test images of the [Conformance] tests of Kubernetes v1.33 (k8s.io/kubernetes
// test/utils/image/manifest.go names them), assembled here because nothing can be pulled.

package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"herd.dev/herd/internal/image"
)

// Registry is where the suite expects its test images; every image is tagged with exactly the
// name the suite uses, so that the kubelet finds it already present.
const Registry = "registry.k8s.io/e2e-test-images/"

// Image is one test image: its reference and what it is made of.
type Image struct {
	Ref string
	// Made says what the image holds in place of upstream's build, for the report.
	Made  string
	build func(b *builder) (*rootfs, image.LayerConfig, error)
}

// Sources are the inputs the images are assembled from.
type Sources struct {
	// Bin holds agnhost, nnp (nonewprivs) and sample-apiserver, built from the k8s.io/kubernetes
	// and k8s.io/sample-apiserver modules by hack/conformance/suite/build.sh.
	Bin string
	// Module is the k8s.io/kubernetes module directory (in the Go module cache): the data files of
	// the images (agnhost's TLS pair, nautilus' and kitten's pages).
	Module string
	// Root is where host files are read from: "/" but in tests.
	Root string
}

type builder struct {
	src  Sources
	base *rootfs // busybox with users, made once
	agn  *rootfs // agnhost's filesystem, made once
}

func (b *builder) host(p string) string { return filepath.Join(b.src.Root, p) }

// passwd and group hold root, nobody, and the user and group agnhost's tests of supplemental
// groups expect to be defined in the image (uid 1000 in gid 50000).
const (
	passwd = "root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	group  = "root:x:0:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\nnogroup:x:65534:\n"
)

// busyboxBase is Debian's static busybox (package busybox-static) with /etc/passwd and
// /etc/group: what busybox:1.36.1, and alpine under the other images, give the tests. /bin/sh is
// Debian's bash: the shell of Debian's busybox 1.35 drops environment variables whose names are
// not identifiers (data-1=value-1 from a Secret's envFrom, which the tests look for in `sh -c
// env`), and runs its own applets (nc) before those on PATH.
func (b *builder) busyboxBase() (*rootfs, error) {
	if b.base == nil {
		r := newRootfs()
		if err := r.busybox(b.host("/bin/busybox")); err != nil {
			return nil, err
		}
		for _, p := range []string{"/bin/sh", "/bin/bash"} {
			if err := r.hostBinary(p, b.host("/bin/bash")); err != nil {
				return nil, err
			}
		}
		r.file("/etc/passwd", 0o644, []byte(passwd))
		r.file("/etc/group", 0o644, []byte(group))
		r.file("/etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n"))
		r.dir("/root", 0o700)
		b.base = r
	}
	return b.base.clone(), nil
}

// withTools adds the programs of the Debian packages the tests call in agnhost and
// jessie-dnsutils: dig, nslookup and host (bind9-dnsutils), getent (libc-bin), curl,
// nc (netcat-openbsd), ip and ss (iproute2).
func (b *builder) withTools(r *rootfs) error {
	for dst, src := range map[string]string{
		"/usr/bin/dig": "/usr/bin/dig", "/usr/bin/nslookup": "/usr/bin/nslookup", "/usr/bin/host": "/usr/bin/host",
		"/usr/bin/getent": "/usr/bin/getent", "/usr/bin/curl": "/usr/bin/curl", "/usr/bin/nc": "/bin/nc.openbsd",
		"/sbin/ip": "/bin/ip", "/usr/bin/ss": "/bin/ss",
	} {
		if err := r.hostBinary(dst, b.host(src)); err != nil {
			return err
		}
	}
	return nil
}

// agnhost is the agnhost image's filesystem: busybox, the tools, /agnhost built from the module
// and the files its Dockerfile adds.
func (b *builder) agnhost() (*rootfs, error) {
	if b.agn == nil {
		r, err := b.busyboxBase()
		if err != nil {
			return nil, err
		}
		if err := b.withTools(r); err != nil {
			return nil, err
		}
		if err := r.hostFile("/agnhost", filepath.Join(b.src.Bin, "agnhost"), 0o755); err != nil {
			return nil, fmt.Errorf("agnhost is not built (hack/conformance/suite/build.sh builds it): %w", err)
		}
		r.symlink("/agnhost-2", "agnhost")
		r.dir("/uploads", 0o755)
		for _, f := range []string{"localhost.crt", "localhost.key"} {
			if err := r.hostFile("/"+f, filepath.Join(b.src.Module, "test/images/agnhost/porter", f), 0o644); err != nil {
				return nil, err
			}
		}
		b.agn = r
	}
	return b.agn.clone(), nil
}

var agnhostConfig = image.LayerConfig{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}

// webserver serves dir on port 80 with busybox's httpd, in place of Apache httpd and nginx
// (upstream's httpd and nginx images are those servers on alpine, pulled from Docker Hub): the
// tests use them as a server that answers on port 80 with index.html, and some move index.html
// away to make a readiness probe fail.
func (b *builder) webserver(dir, index string) (*rootfs, image.LayerConfig, error) {
	r, err := b.busyboxBase()
	if err != nil {
		return nil, image.LayerConfig{}, err
	}
	r.file(dir+"/index.html", 0o644, []byte(index))
	return r, image.LayerConfig{Cmd: []string{"httpd", "-f", "-v", "-p", "80", "-h", dir}}, nil
}

const itWorks = "<html><body><h1>It works!</h1></body></html>\n"

// updateDemo is nautilus or kitten: agnhost's test-webserver serving a picture and data.json.
func (b *builder) updateDemo(name string) (*rootfs, image.LayerConfig, error) {
	r, err := b.agnhost()
	if err != nil {
		return nil, image.LayerConfig{}, err
	}
	for _, f := range []string{name + ".jpg", "data.json"} {
		if err := r.hostFile("/"+f, filepath.Join(b.src.Module, "test/images", name, "html", f), 0o644); err != nil {
			return nil, image.LayerConfig{}, err
		}
	}
	return r, image.LayerConfig{Entrypoint: agnhostConfig.Entrypoint, Cmd: []string{"test-webserver"}}, nil
}

// Images are the test images the [Conformance] tests reference, with how each is made here.
var Images = []Image{
	{Ref: Registry + "agnhost:2.53", Made: "agnhost built from k8s.io/kubernetes test/images/agnhost; busybox, bash, dig, curl, nc, ip, ss from Debian",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			r, err := b.agnhost()
			return r, agnhostConfig, err
		}},
	{Ref: Registry + "busybox:1.36.1-1", Made: "Debian's busybox-static (1.35), bash as sh",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			r, err := b.busyboxBase()
			return r, image.LayerConfig{Cmd: []string{"sh"}}, err
		}},
	{Ref: Registry + "jessie-dnsutils:1.7", Made: "busybox with Debian's dig, nslookup, host and getent",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			r, err := b.busyboxBase()
			if err == nil {
				err = b.withTools(r)
			}
			return r, image.LayerConfig{Cmd: []string{"bash"}}, err
		}},
	{Ref: Registry + "httpd:2.4.38-4", Made: "busybox httpd serving /usr/local/apache2/htdocs on port 80 (not Apache)",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			return b.webserver("/usr/local/apache2/htdocs", itWorks)
		}},
	{Ref: Registry + "httpd:2.4.39-4", Made: "busybox httpd serving /usr/local/apache2/htdocs on port 80 (not Apache)",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			return b.webserver("/usr/local/apache2/htdocs", itWorks)
		}},
	{Ref: Registry + "nginx:1.14-4", Made: "busybox httpd serving /usr/share/nginx/html on port 80 (not nginx)",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			return b.webserver("/usr/share/nginx/html", itWorks)
		}},
	{Ref: Registry + "nginx:1.15-4", Made: "busybox httpd serving /usr/share/nginx/html on port 80 (not nginx)",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			return b.webserver("/usr/share/nginx/html", itWorks)
		}},
	{Ref: Registry + "nautilus:1.7", Made: "agnhost test-webserver with test/images/nautilus/html",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) { return b.updateDemo("nautilus") }},
	{Ref: Registry + "kitten:1.7", Made: "agnhost test-webserver with test/images/kitten/html",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) { return b.updateDemo("kitten") }},
	{Ref: Registry + "nonewprivs:1.3", Made: "nnp built from k8s.io/kubernetes test/images/nonewprivs, setuid root, on busybox",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			r, err := b.busyboxBase()
			if err != nil {
				return nil, image.LayerConfig{}, err
			}
			if err := r.hostFile("/usr/local/bin/nnp", filepath.Join(b.src.Bin, "nnp"), 0o4755); err != nil {
				return nil, image.LayerConfig{}, fmt.Errorf("nnp is not built (hack/conformance/suite/build.sh builds it): %w", err)
			}
			return r, image.LayerConfig{Cmd: []string{"nnp"}}, nil
		}},
	{Ref: Registry + "nonroot:1.4", Made: "busybox with USER 1234",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			r, err := b.busyboxBase()
			return r, image.LayerConfig{Cmd: []string{"sh"}, User: "1234"}, err
		}},
	{Ref: Registry + "sample-apiserver:1.29.2", Made: "sample-apiserver built from k8s.io/sample-apiserver v0.33.5 (the proxy serves no v0.33.13 source), on busybox",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			r, err := b.busyboxBase()
			if err != nil {
				return nil, image.LayerConfig{}, err
			}
			if err := r.hostFile("/sample-apiserver", filepath.Join(b.src.Bin, "sample-apiserver"), 0o755); err != nil {
				return nil, image.LayerConfig{}, fmt.Errorf("sample-apiserver is not built (hack/conformance/suite/build.sh builds it): %w", err)
			}
			return r, image.LayerConfig{Entrypoint: []string{"/sample-apiserver"}}, nil
		}},
	{Ref: "registry.k8s.io/etcd:3.5.21-0", Made: "Debian's etcd-server (3.4) at /usr/local/bin/etcd, on busybox",
		build: func(b *builder) (*rootfs, image.LayerConfig, error) {
			r, err := b.busyboxBase()
			if err == nil {
				err = r.hostBinary("/usr/local/bin/etcd", b.host("/usr/bin/etcd"))
			}
			r.dir("/var/etcd", 0o700)
			return r, image.LayerConfig{}, err
		}},
}

// BuildImages writes every test image as a docker-archive tar into dir, named after its
// reference, and returns the file of each reference. progress is told of each image.
func BuildImages(src Sources, dir string, progress func(string)) (map[string]string, error) {
	if src.Root == "" {
		src.Root = "/"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b := &builder{src: src}
	files := map[string]string{}
	for _, im := range Images {
		r, cfg, err := im.build(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", im.Ref, err)
		}
		base := strings.NewReplacer("/", "_", ":", "_").Replace(im.Ref)
		dst := filepath.Join(dir, base+".tar")
		layer := filepath.Join(dir, base+".layer")
		if err := writeImage(r, cfg, im.Ref, layer, dst); err != nil {
			return nil, err
		}
		if err := os.Remove(layer); err != nil {
			return nil, err
		}
		if fi, err := os.Stat(dst); err == nil {
			progress(fmt.Sprintf("%-58s %6.1f MB  %s", im.Ref, float64(fi.Size())/1e6, im.Made))
		}
		files[im.Ref] = dst
	}
	return files, nil
}
