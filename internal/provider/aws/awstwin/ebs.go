package awstwin

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The EBS direct APIs (service "ebs", REST-JSON): a snapshot is started, written block by block
// with each block's SHA-256, and completed with the SHA-256 of the blocks' checksums in block
// order. The twin keeps the blocks in memory, so a test reads back what was written.

// BlockSize is the EBS direct APIs' only block size: 512 KiB.
const BlockSize = 512 << 10

// Snapshot states, as EC2 and the EBS direct APIs write them.
const (
	SnapshotPending   = "pending"
	SnapshotCompleted = "completed"
	SnapshotError     = "error"
)

// Snapshot is the twin's record of an EBS snapshot. Tests read copies of it (Twin.Snapshots).
type Snapshot struct {
	ID, Region, Description string
	VolumeSize              int64 // GiB
	Tags                    map[string]string
	State                   string
	StartTime               time.Time
	// Blocks are the written blocks by index, each BlockSize long.
	Blocks map[int32][]byte
	// Refused counts the blocks refused because their data did not match their checksum.
	Refused int
}

// ebsState is what the twin keeps for the EBS direct APIs and the images made from them.
type ebsState struct {
	snapshots map[string]*Snapshot // by ID
	tokens    map[string]string    // region + "/" + ClientToken -> snapshot or image ID
	// completeDelay is how long a completed snapshot stays pending in EC2's view.
	completeDelay time.Duration
	completedAt   map[string]time.Time
}

// SnapshotDelay makes a snapshot that CompleteSnapshot sealed stay pending for d in
// DescribeSnapshots before it is completed, as EC2's are while EBS stores them.
func (tw *Twin) SnapshotDelay(d time.Duration) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.ebs.completeDelay = d
}

// Snapshots returns copies of the snapshots the twin has, in ID order.
func (tw *Twin) Snapshots() []Snapshot {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	var out []Snapshot
	for _, id := range slices.Sorted(maps.Keys(tw.ebs.snapshots)) {
		s := tw.ebs.snapshots[id]
		tw.advanceSnapshot(s)
		c := *s
		c.Tags = maps.Clone(s.Tags)
		c.Blocks = maps.Clone(s.Blocks)
		out = append(out, c)
	}
	return out
}

// advanceSnapshot completes s once its delay ran out; the caller holds tw.mu.
func (tw *Twin) advanceSnapshot(s *Snapshot) {
	if at, ok := tw.ebs.completedAt[s.ID]; ok && s.State == SnapshotPending && !tw.opts.Now().Before(at) {
		s.State = SnapshotCompleted
	}
}

// ebsError is an error of the EBS direct APIs: its type in X-Amzn-ErrorType, its message and
// reason in the JSON body.
type ebsError struct {
	status      int
	typ, reason string
	message     string
}

func ebsErrorf(status int, typ, reason, format string, args ...any) *ebsError {
	return &ebsError{status: status, typ: typ, reason: reason, message: fmt.Sprintf(format, args...)}
}

func invalid(reason, format string, args ...any) *ebsError {
	return ebsErrorf(http.StatusBadRequest, "ValidationException", reason, format, args...)
}

// ebsAnswer is a successful answer: a status, headers and a JSON body or raw bytes.
type ebsAnswer struct {
	status  int
	headers map[string]string
	json    any
	raw     []byte
}

// serveEBS answers one call of the EBS direct APIs.
func (tw *Twin) serveEBS(w http.ResponseWriter, r *http.Request) {
	requestID := newRequestID()
	w.Header().Set("x-amzn-RequestId", requestID)
	body, err := io.ReadAll(io.LimitReader(r.Body, BlockSize+1))
	if err != nil {
		writeEBSError(w, invalid("INVALID_PARAMETER_VALUE", "read the request: %v", err))
		return
	}
	region, aerr := tw.authenticate(r, body, "ebs")
	if aerr != nil {
		writeEBSError(w, ebsErrorf(http.StatusForbidden, "AccessDeniedException", "UNAUTHORIZED_ACCOUNT", "%s", aerr.message))
		return
	}
	action, args := ebsRoute(r.Method, r.URL.Path)
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.calls[action]++
	var answer ebsAnswer
	var eerr *ebsError
	switch {
	case action == "":
		eerr = ebsErrorf(http.StatusNotFound, "ResourceNotFoundException", "", "no EBS direct API at %s %s", r.Method, r.URL.Path)
	case tw.faults.denied[action]:
		eerr = ebsErrorf(http.StatusForbidden, "AccessDeniedException", "UNAUTHORIZED_ACCOUNT",
			"User: arn:aws:iam::%s:user/herd is not authorized to perform: ebs:%s", OwnerID, action)
	case action == "StartSnapshot":
		answer, eerr = tw.startSnapshot(region, body)
	case action == "PutSnapshotBlock":
		answer, eerr = tw.putSnapshotBlock(region, args, r.Header, body)
	case action == "CompleteSnapshot":
		answer, eerr = tw.completeSnapshot(region, args, r.Header)
	case action == "ListSnapshotBlocks":
		answer, eerr = tw.listSnapshotBlocks(region, args, r)
	case action == "GetSnapshotBlock":
		answer, eerr = tw.getSnapshotBlock(region, args)
	}
	if eerr != nil {
		writeEBSError(w, eerr)
		return
	}
	for k, v := range answer.headers {
		w.Header().Set(k, v)
	}
	if answer.raw != nil {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(answer.status)
		_, _ = w.Write(answer.raw)
		return
	}
	b := []byte("{}")
	if answer.json != nil {
		b, _ = json.Marshal(answer.json)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(answer.status)
	_, _ = w.Write(b)
}

// ebsRoute names the action of a method and path, and its path's labels.
func ebsRoute(method, path string) (string, []string) {
	p := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case method == http.MethodPost && len(p) == 1:
		return "StartSnapshot", nil
	case method == http.MethodPost && len(p) == 3 && p[1] == "completion":
		return "CompleteSnapshot", p[2:]
	case method == http.MethodPut && len(p) == 4 && p[2] == "blocks":
		return "PutSnapshotBlock", []string{p[1], p[3]}
	case method == http.MethodGet && len(p) == 4 && p[2] == "blocks":
		return "GetSnapshotBlock", []string{p[1], p[3]}
	case method == http.MethodGet && len(p) == 3 && p[2] == "blocks":
		return "ListSnapshotBlocks", p[1:2]
	}
	return "", nil
}

func writeEBSError(w http.ResponseWriter, e *ebsError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", e.typ)
	w.WriteHeader(e.status)
	body := map[string]string{"Message": e.message}
	if e.reason != "" {
		body["Reason"] = e.reason
	}
	b, _ := json.Marshal(body)
	_, _ = w.Write(b)
}

type jsonTag struct{ Key, Value string }

func jsonTags(tags map[string]string) []jsonTag {
	var out []jsonTag
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, jsonTag{k, tags[k]})
	}
	return out
}

func (tw *Twin) startSnapshot(region string, body []byte) (ebsAnswer, *ebsError) {
	var in struct {
		VolumeSize       int64
		Tags             []jsonTag
		Description      string
		ClientToken      string
		ParentSnapshotID string `json:"ParentSnapshotId"`
		Encrypted        bool
		Timeout          int
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return ebsAnswer{}, invalid("INVALID_PARAMETER_VALUE", "the request is not JSON: %v", err)
	}
	if in.VolumeSize < 1 || in.VolumeSize > 65536 {
		return ebsAnswer{}, invalid("INVALID_VOLUME_SIZE", "VolumeSize %d: must be between 1 and 65536 GiB", in.VolumeSize)
	}
	if in.ParentSnapshotID != "" || in.Encrypted {
		return ebsAnswer{}, invalid("INVALID_PARAMETER_VALUE", "the twin makes only new, unencrypted snapshots")
	}
	tags := map[string]string{}
	for _, t := range in.Tags {
		if strings.HasPrefix(strings.ToLower(t.Key), "aws:") {
			return ebsAnswer{}, invalid("INVALID_TAG", "Tag keys starting with 'aws:' are reserved for internal use")
		}
		tags[t.Key] = t.Value
	}
	if in.ClientToken != "" {
		if id, ok := tw.ebs.tokens[region+"/"+in.ClientToken]; ok {
			return ebsAnswer{status: http.StatusCreated, json: snapshotJSON(tw.ebs.snapshots[id])}, nil
		}
	}
	tw.seq++
	s := &Snapshot{ID: fmt.Sprintf("snap-%017x", tw.seq), Region: region, Description: in.Description,
		VolumeSize: in.VolumeSize, Tags: tags, State: SnapshotPending, StartTime: tw.opts.Now(), Blocks: map[int32][]byte{}}
	tw.ebs.snapshots[s.ID] = s
	if in.ClientToken != "" {
		tw.ebs.tokens[region+"/"+in.ClientToken] = s.ID
	}
	return ebsAnswer{status: http.StatusCreated, json: snapshotJSON(s)}, nil
}

func snapshotJSON(s *Snapshot) map[string]any {
	return map[string]any{
		"SnapshotId": s.ID, "OwnerId": OwnerID, "Status": s.State, "StartTime": float64(s.StartTime.UnixMilli()) / 1000,
		"VolumeSize": s.VolumeSize, "BlockSize": BlockSize, "Tags": jsonTags(s.Tags), "Description": s.Description,
	}
}

// snapshot finds snapshot id in region.
func (tw *Twin) snapshot(region, id string) (*Snapshot, *ebsError) {
	s, ok := tw.ebs.snapshots[id]
	if !ok || s.Region != region {
		return nil, ebsErrorf(http.StatusNotFound, "ResourceNotFoundException", "SNAPSHOT_NOT_FOUND", "The snapshot '%s' does not exist.", id)
	}
	tw.advanceSnapshot(s)
	return s, nil
}

func (tw *Twin) putSnapshotBlock(region string, args []string, h http.Header, body []byte) (ebsAnswer, *ebsError) {
	s, eerr := tw.snapshot(region, args[0])
	if eerr != nil {
		return ebsAnswer{}, eerr
	}
	if s.State != SnapshotPending || tw.ebs.completedAt[s.ID] != (time.Time{}) {
		return ebsAnswer{}, invalid("INVALID_SNAPSHOT_ID", "The snapshot '%s' is not pending: its blocks can no longer be written.", s.ID)
	}
	index, err := strconv.ParseInt(args[1], 10, 32)
	if err != nil || index < 0 || index*BlockSize >= s.VolumeSize<<30 {
		return ebsAnswer{}, invalid("INVALID_PARAMETER_VALUE", "Block index %s is outside the volume of %d GiB.", args[1], s.VolumeSize)
	}
	if n, err := strconv.Atoi(h.Get("x-amz-Data-Length")); err != nil || n != BlockSize || len(body) != BlockSize {
		return ebsAnswer{}, invalid("INVALID_PARAMETER_VALUE", "A block must be %d bytes: x-amz-Data-Length %q, %d bytes received.", BlockSize, h.Get("x-amz-Data-Length"), len(body))
	}
	if a := h.Get("x-amz-Checksum-Algorithm"); a != "SHA256" {
		return ebsAnswer{}, invalid("INVALID_PARAMETER_VALUE", "x-amz-Checksum-Algorithm %q: must be SHA256.", a)
	}
	sum := sha256.Sum256(body)
	got := base64.StdEncoding.EncodeToString(sum[:])
	if h.Get("x-amz-Checksum") != got {
		s.Refused++
		return ebsAnswer{}, invalid("INVALID_BLOCK", "The checksum %q does not match the block's data.", h.Get("x-amz-Checksum"))
	}
	s.Blocks[int32(index)] = bytes.Clone(body)
	return ebsAnswer{status: http.StatusCreated, headers: map[string]string{"x-amz-Checksum": got, "x-amz-Checksum-Algorithm": "SHA256"}}, nil
}

// aggregateChecksum is the LINEAR aggregation of a snapshot's block checksums: the SHA-256 of
// the blocks' SHA-256 sums, concatenated in block order.
func aggregateChecksum(blocks map[int32][]byte) string {
	h := sha256.New()
	for _, i := range slices.Sorted(maps.Keys(blocks)) {
		sum := sha256.Sum256(blocks[i])
		h.Write(sum[:])
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

func (tw *Twin) completeSnapshot(region string, args []string, h http.Header) (ebsAnswer, *ebsError) {
	s, eerr := tw.snapshot(region, args[0])
	if eerr != nil {
		return ebsAnswer{}, eerr
	}
	if _, done := tw.ebs.completedAt[s.ID]; done {
		return ebsAnswer{status: http.StatusAccepted, json: map[string]string{"Status": s.State}}, nil
	}
	n, err := strconv.Atoi(h.Get("x-amz-ChangedBlocksCount"))
	if err != nil || n != len(s.Blocks) {
		return ebsAnswer{}, invalid("INVALID_PARAMETER_VALUE", "x-amz-ChangedBlocksCount %q: %d blocks were written.", h.Get("x-amz-ChangedBlocksCount"), len(s.Blocks))
	}
	if sum := h.Get("x-amz-Checksum"); sum != "" {
		if h.Get("x-amz-Checksum-Algorithm") != "SHA256" || h.Get("x-amz-Checksum-Aggregation-Method") != "LINEAR" {
			return ebsAnswer{}, invalid("INVALID_PARAMETER_VALUE", "the aggregated checksum must be SHA256 with the LINEAR aggregation method")
		}
		if sum != aggregateChecksum(s.Blocks) {
			return ebsAnswer{}, invalid("INVALID_PARAMETER_VALUE", "The aggregated checksum %q does not match the blocks written.", sum)
		}
	}
	tw.ebs.completedAt[s.ID] = tw.opts.Now().Add(tw.ebs.completeDelay)
	tw.advanceSnapshot(s)
	return ebsAnswer{status: http.StatusAccepted, json: map[string]string{"Status": s.State}}, nil
}

func (tw *Twin) listSnapshotBlocks(region string, args []string, r *http.Request) (ebsAnswer, *ebsError) {
	s, eerr := tw.snapshot(region, args[0])
	if eerr != nil {
		return ebsAnswer{}, eerr
	}
	q := r.URL.Query()
	limit := 10000
	if v := q.Get("maxResults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 || n > 10000 {
			return ebsAnswer{}, invalid("INVALID_PARAMETER_VALUE", "maxResults %q: must be between 100 and 10000.", v)
		}
		limit = n
	}
	start := int32(0)
	if v := q.Get("startingBlockIndex"); v != "" {
		n, _ := strconv.ParseInt(v, 10, 32)
		start = int32(n)
	}
	if v := q.Get("pageToken"); v != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(v, "twin-"), 10, 32)
		if err != nil || !strings.HasPrefix(v, "twin-") {
			return ebsAnswer{}, invalid("INVALID_PAGE_TOKEN", "The page token %q is not valid.", v)
		}
		start = int32(n)
	}
	type block struct {
		BlockIndex int32
		BlockToken string
	}
	out := map[string]any{"VolumeSize": s.VolumeSize, "BlockSize": BlockSize,
		"ExpiryTime": float64(tw.opts.Now().Add(time.Hour).Unix())}
	blocks := []block{}
	for _, i := range slices.Sorted(maps.Keys(s.Blocks)) {
		if i < start {
			continue
		}
		if len(blocks) == limit {
			out["NextToken"] = fmt.Sprintf("twin-%d", i)
			break
		}
		blocks = append(blocks, block{i, blockToken(s.ID, i)})
	}
	out["Blocks"] = blocks
	return ebsAnswer{status: http.StatusOK, json: out}, nil
}

func blockToken(snapshot string, index int32) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s/%d", snapshot, index))
}

func (tw *Twin) getSnapshotBlock(region string, args []string) (ebsAnswer, *ebsError) {
	s, eerr := tw.snapshot(region, args[0])
	if eerr != nil {
		return ebsAnswer{}, eerr
	}
	index, err := strconv.ParseInt(args[1], 10, 32)
	data, ok := s.Blocks[int32(index)]
	if err != nil || !ok {
		return ebsAnswer{}, invalid("INVALID_BLOCK_TOKEN", "Block %s of %s was never written.", args[1], s.ID)
	}
	sum := sha256.Sum256(data)
	return ebsAnswer{status: http.StatusOK, raw: data, headers: map[string]string{
		"x-amz-Data-Length": strconv.Itoa(len(data)), "x-amz-Checksum": base64.StdEncoding.EncodeToString(sum[:]), "x-amz-Checksum-Algorithm": "SHA256",
	}}, nil
}
