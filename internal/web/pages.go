package web

import (
	"bytes"
	"encoding/binary"
	"errors"
	"html/template"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"sync"

	"herd.dev/herd/internal/store"
)

// pages are the dashboard's HTML documents that the server fills in: the login form (which names
// where herd up wrote the token) and the page for what does not exist.
var pages = template.Must(template.ParseFS(assets, "assets/login.html", "assets/notfound.html"))

// page serves the shell of a page to a logged-in browser, and sends anyone else to log in. kind
// is the store kind the page's {name} names ("" for the overview): a name the store does not
// have gets the not-found page, not an empty shell.
func (h *Handler) page(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.authenticated(r) {
			http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		if kind != "" {
			name := r.PathValue("name")
			_, err := h.opts.Store.Get(r.Context(), kind, name)
			switch {
			case errors.Is(err, store.ErrNotFound):
				what := map[string]string{store.Fleets: "fleet", store.Instances: "instance"}[kind]
				h.notFound(w, notFound{Title: "No " + what + " named " + name,
					Hint: "It was deleted, or never created. herd get " + what + "s lists them."})
				return
			case err != nil:
				h.log.Error("dashboard page", "kind", kind, "name", name, "err", err)
				http.Error(w, "read the store: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		data, _ := assets.ReadFile("assets/index.html") // embedded: always there
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(data)
	}
}

// notFound is what the not-found page says.
type notFound struct{ Title, Hint string }

// unknownPage answers any other path under /ui.
func (h *Handler) unknownPage(w http.ResponseWriter, r *http.Request) {
	if !h.authenticated(r) {
		http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
		return
	}
	h.notFound(w, notFound{Title: "No page at " + r.URL.Path, Hint: "The dashboard has the fleets' overview, a page per fleet and a page per instance."})
}

func (h *Handler) notFound(w http.ResponseWriter, nf notFound) {
	h.render(w, http.StatusNotFound, "notfound.html", nf)
}

// render writes the named template, whole or not at all.
func (h *Handler) render(w http.ResponseWriter, code int, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		h.log.Error("dashboard page", "template", name, "err", err)
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	h.render(w, http.StatusOK, "login.html", struct{ TokenFile, ConfigFile string }{h.opts.TokenFile, h.opts.ConfigFile})
}

// serveFavicon answers /favicon.ico.
func serveFavicon(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "image/x-icon")
	w.Header().Set("Cache-Control", "public, max-age=86400")
	_, _ = w.Write(favicon())
}

// favicon is a 32x32 picture of an instance grid (three by three squares, one of them starting),
// drawn once, as an ICO file that holds a PNG, which browsers read.
var favicon = sync.OnceValue(func() []byte {
	const size, margin, cell, gap = 32, 2, 8, 2
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	bg := color.NRGBA{0x20, 0x26, 0x2d, 0xff}
	ok, starting := color.NRGBA{0x2e, 0x9e, 0x4f, 0xff}, color.NRGBA{0x6b, 0x9b, 0xd1, 0xff}
	for y := range size {
		for x := range size {
			img.Set(x, y, bg)
		}
	}
	for i := range 9 {
		c := ok
		if i == 8 {
			c = starting
		}
		x0, y0 := margin+(i%3)*(cell+gap), margin+(i/3)*(cell+gap)
		for y := y0; y < y0+cell; y++ {
			for x := x0; x < x0+cell; x++ {
				img.Set(x, y, c)
			}
		}
	}
	var pic bytes.Buffer
	if err := png.Encode(&pic, img); err != nil {
		panic(err) // encoding an in-memory image cannot fail
	}
	// ICONDIR (reserved, type 1 = icon, one image), then its ICONDIRENTRY (32x32, no palette,
	// 1 plane, 32 bits, the PNG's size and offset), then the PNG.
	var ico bytes.Buffer
	_ = binary.Write(&ico, binary.LittleEndian, []uint16{0, 1, 1})
	ico.Write([]byte{size, size, 0, 0})
	_ = binary.Write(&ico, binary.LittleEndian, []uint16{1, 32})
	_ = binary.Write(&ico, binary.LittleEndian, []uint32{uint32(pic.Len()), 6 + 16})
	ico.Write(pic.Bytes())
	return ico.Bytes()
})
