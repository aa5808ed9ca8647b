package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// MaxFileSize bounds one file of objects. Real specs are a few KB; anything this large is a mistake
// (a binary or a log passed by accident) and is refused before parsing.
const MaxFileSize = 1 << 20

// Document is one decoded object of a multi-document file, with where it came from.
type Document struct {
	// Index is the document's position in the file, from 0.
	Index int
	// Kind is the object's kind.
	Kind string
	// Object is a *Fleet, a *NodeImage or a *Distribution.
	Object any
}

// FileError lists every problem found in a file, document by document.
type FileError struct {
	// Documents is how many documents the file holds.
	Documents int
	// Problems maps a document's index to its problems.
	Problems map[int]ErrorList
}

func (e *FileError) Error() string {
	idx := make([]int, 0, len(e.Problems))
	for i := range e.Problems {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var lines []string
	for _, i := range idx {
		for _, fe := range e.Problems[i] {
			if e.Documents > 1 {
				lines = append(lines, fmt.Sprintf("document %d: %s", i+1, fe.Error()))
			} else {
				lines = append(lines, fe.Error())
			}
		}
	}
	return strings.Join(lines, "\n")
}

// Decode parses a YAML or JSON file holding one or more objects separated by "---" lines. Unknown
// fields, unknown kinds, tabs in indentation and empty files are errors; every document is checked
// and every problem is reported in a *FileError.
func Decode(data []byte) ([]Document, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("file is %d bytes; herd reads at most %d bytes (1 MiB) per file: is it the right file?", len(data), MaxFileSize)
	}
	if line := tabIndentedLine(data); line > 0 {
		return nil, fmt.Errorf("line %d: indented with a tab; YAML allows only spaces for indentation", line)
	}
	raws := SplitDocuments(data)
	if len(raws) == 0 {
		return nil, errors.New("file holds no object: expected YAML with apiVersion, kind, metadata and spec")
	}
	fe := &FileError{Documents: len(raws), Problems: map[int]ErrorList{}}
	var docs []Document
	for i, raw := range raws {
		obj, kind, errs := decodeOne(raw)
		if len(errs) > 0 {
			fe.Problems[i] = errs
			continue
		}
		docs = append(docs, Document{Index: i, Kind: kind, Object: obj})
	}
	if len(fe.Problems) > 0 {
		return nil, fe
	}
	return docs, nil
}

// DecodeAndValidate decodes a file, applies defaults to every object and validates it, reporting
// every problem of every document at once. defaultProvider and pinnedVersion feed the defaults.
func DecodeAndValidate(data []byte, defaultProvider, pinnedVersion string) ([]Document, error) {
	docs, err := Decode(data)
	if err != nil {
		return nil, err
	}
	fe := &FileError{Documents: len(docs), Problems: map[int]ErrorList{}}
	for _, d := range docs {
		var errs ErrorList
		switch o := d.Object.(type) {
		case *Fleet:
			SetFleetDefaults(o, defaultProvider)
			errs = ValidateFleet(o)
		case *NodeImage:
			SetNodeImageDefaults(o, pinnedVersion)
			errs = ValidateNodeImage(o)
		case *Distribution:
			SetDistributionDefaults(o)
			errs = ValidateDistribution(o)
		}
		if len(errs) > 0 {
			fe.Problems[d.Index] = errs
		}
	}
	if len(fe.Problems) > 0 {
		return nil, fe
	}
	return docs, nil
}

func tabIndentedLine(data []byte) int {
	for i, line := range bytes.Split(data, []byte("\n")) {
		trimmed := bytes.TrimLeft(line, " ")
		if len(trimmed) > 0 && trimmed[0] == '\t' {
			return i + 1
		}
	}
	return 0
}

// SplitDocuments splits a YAML file on "---" separator lines and drops documents that hold only comments or
// whitespace, as kubectl does.
func SplitDocuments(data []byte) [][]byte {
	var out [][]byte
	var cur []byte
	flush := func() {
		for _, l := range bytes.Split(cur, []byte("\n")) {
			t := bytes.TrimSpace(l)
			if len(t) > 0 && t[0] != '#' {
				out = append(out, cur)
				break
			}
		}
		cur = nil
	}
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if t := bytes.TrimRight(line, " \r\n"); bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) {
			flush()
			continue
		}
		cur = append(cur, line...)
	}
	flush()
	return out
}

func decodeOne(raw []byte) (any, string, ErrorList) {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, "", ErrorList{{Field: "(yaml)", Message: strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")}}
	}
	var generic map[string]any
	if err := json.Unmarshal(js, &generic); err != nil || generic == nil {
		return nil, "", ErrorList{{Field: "(document)", Message: "must be a mapping with apiVersion, kind, metadata and spec"}}
	}
	kind, _ := generic["kind"].(string)
	var obj any
	switch kind {
	case KindFleet:
		obj = &Fleet{}
	case KindNodeImage:
		obj = &NodeImage{}
	case KindDistribution:
		obj = &Distribution{}
	case "":
		return nil, "", ErrorList{{Field: "kind", Message: "required: Fleet, NodeImage or Distribution"}}
	default:
		return nil, "", ErrorList{{Field: "kind", Message: fmt.Sprintf("unknown kind %q: herd reads Fleet (herd apply), NodeImage (herd image build) and Distribution (herd edge)", kind)}}
	}
	var errs ErrorList
	unknownFields(&errs, "", generic, reflect.TypeOf(obj).Elem())
	if len(errs) > 0 {
		return nil, kind, errs
	}
	if err := json.Unmarshal(js, obj); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, kind, ErrorList{{Field: te.Field, Message: fmt.Sprintf("must be %s (got %s)", describeType(te.Type), te.Value)}}
		}
		return nil, kind, ErrorList{{Field: "(document)", Message: err.Error()}}
	}
	// Status, requests and read-only metadata are the control plane's; what a user writes there is
	// dropped.
	if f, ok := obj.(*Fleet); ok {
		f.Status, f.Requests = FleetStatus{}, FleetRequests{}
		f.Metadata.ResourceVersion, f.Metadata.Generation, f.Metadata.CreationTimestamp = 0, 0, nil
	}
	return obj, kind, nil
}

func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

var durationType = reflect.TypeOf(Duration{})

// unknownFields walks the decoded document beside the Go type and reports every key the type does
// not have, with its path and, where one is close, the field that was probably meant.
func unknownFields(errs *ErrorList, path string, v any, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch val := v.(type) {
	case map[string]any:
		if t.Kind() == reflect.Map {
			for k, e := range val {
				unknownFields(errs, join(path, k), e, t.Elem())
			}
			return
		}
		if t.Kind() != reflect.Struct || t == durationType {
			return // a type mismatch, reported by the decoder with its path
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(val))
		for k := range val {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				msg := "unknown field"
				if s := closest(k, fields); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				}
				errs.add(join(path, k), "%s", msg)
				continue
			}
			unknownFields(errs, join(path, k), val[k], ft)
		}
	case []any:
		if t.Kind() == reflect.Slice {
			for i, e := range val {
				unknownFields(errs, fmt.Sprintf("%s[%d]", path, i), e, t.Elem())
			}
		}
	}
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// jsonFields maps the JSON names of a struct's fields (inline embedded structs flattened) to types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// closest returns the known field nearest to k by edit distance, if it is near enough to be a typo.
func closest(k string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for f := range fields {
		names = append(names, f)
	}
	sort.Strings(names)
	best, bestD := "", 3 // more than two edits away is not a typo
	for _, f := range names {
		if d := editDistance(strings.ToLower(k), strings.ToLower(f)); d < bestD {
			best, bestD = f, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
