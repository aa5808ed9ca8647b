package awstwin

import (
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// EC2's actions on AMIs and snapshots: RegisterImage from a snapshot of the EBS direct APIs,
// CopyImage to another region, DeregisterImage, DescribeSnapshots and DeleteSnapshot.

// Registration is what RegisterImage and CopyImage record of an AMI.
type Registration struct {
	Description, Architecture   string
	RootDeviceName, BootMode    string
	VirtualizationType          string
	ImdsSupport                 string
	EnaSupport                  bool
	BlockDevices                []BlockDevice
	SourceImageID, SourceRegion string // CopyImage's
	Created                     time.Time
}

// BlockDevice is one of an AMI's block device mappings.
type BlockDevice struct {
	DeviceName, SnapshotID, VolumeType string
	VolumeSize                         int64 // GiB
	DeleteOnTermination                bool
}

// ec2Header is the namespace and request ID every EC2 answer starts with.
type ec2Header struct {
	Namespace string `xml:"xmlns,attr"`
	RequestID string `xml:"requestId"`
}

func (h *ec2Header) setHeader(id string) { h.Namespace, h.RequestID = namespace, id }

type imageIDResponse struct {
	XMLName xml.Name
	ec2Header
	ImageID string `xml:"imageId"`
}

type returnResponse struct {
	XMLName xml.Name
	ec2Header
	Return bool `xml:"return"`
}

type xmlEBS struct {
	SnapshotID          string `xml:"snapshotId"`
	VolumeSize          int64  `xml:"volumeSize"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
	VolumeType          string `xml:"volumeType"`
}

type xmlBlockDevice struct {
	DeviceName string `xml:"deviceName"`
	EBS        xmlEBS `xml:"ebs"`
}

// xmlRegistration is what DescribeImages writes of a Registration.
type xmlRegistration struct {
	Description        string           `xml:"description,omitempty"`
	ImageType          string           `xml:"imageType"`
	RootDeviceType     string           `xml:"rootDeviceType"`
	RootDeviceName     string           `xml:"rootDeviceName,omitempty"`
	VirtualizationType string           `xml:"virtualizationType,omitempty"`
	BootMode           string           `xml:"bootMode,omitempty"`
	ImdsSupport        string           `xml:"imdsSupport,omitempty"`
	EnaSupport         bool             `xml:"enaSupport"`
	BlockDevices       []xmlBlockDevice `xml:"blockDeviceMapping>item,omitempty"`
	SourceImageID      string           `xml:"sourceImageId,omitempty"`
	SourceRegion       string           `xml:"sourceImageRegion,omitempty"`
}

type xmlSnapshot struct {
	SnapshotID  string   `xml:"snapshotId"`
	VolumeID    string   `xml:"volumeId"`
	Status      string   `xml:"status"`
	StartTime   string   `xml:"startTime"`
	Progress    string   `xml:"progress"`
	OwnerID     string   `xml:"ownerId"`
	VolumeSize  int64    `xml:"volumeSize"`
	Description string   `xml:"description"`
	Encrypted   bool     `xml:"encrypted"`
	Tags        []xmlTag `xml:"tagSet>item,omitempty"`
}

type describeSnapshotsResponse struct {
	XMLName xml.Name `xml:"DescribeSnapshotsResponse"`
	ec2Header
	Snapshots []xmlSnapshot `xml:"snapshotSet>item"`
}

// state is the image's state: AddImage's and registered images are available at once.
func (img *Image) state() string { return "available" }

func (img *Image) xml() xmlImage {
	x := xmlImage{ImageID: img.ID, ImageState: img.state(), OwnerID: OwnerID, Name: img.Name,
		CreationDate: "2026-01-01T00:00:00.000Z", Architecture: img.Architecture, Tags: xmlTags(img.Tags)}
	if x.Architecture == "" {
		x.Architecture = "x86_64"
	}
	if !img.Created.IsZero() {
		x.CreationDate = isoTime(img.Created)
	}
	r := img.Registration
	x.xmlRegistration = xmlRegistration{Description: r.Description, ImageType: "machine", RootDeviceType: "ebs",
		RootDeviceName: r.RootDeviceName, VirtualizationType: r.VirtualizationType, BootMode: r.BootMode,
		ImdsSupport: r.ImdsSupport, EnaSupport: r.EnaSupport, SourceImageID: r.SourceImageID, SourceRegion: r.SourceRegion}
	for _, b := range r.BlockDevices {
		x.BlockDevices = append(x.BlockDevices, xmlBlockDevice{DeviceName: b.DeviceName,
			EBS: xmlEBS{SnapshotID: b.SnapshotID, VolumeSize: b.VolumeSize, DeleteOnTermination: b.DeleteOnTermination, VolumeType: b.VolumeType}})
	}
	return x
}

// Images returns copies of the AMIs the twin has, in ID order.
func (tw *Twin) Images() []Image {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	var out []Image
	for _, id := range slices.Sorted(maps.Keys(tw.images)) {
		c := *tw.images[id]
		c.Tags = maps.Clone(c.Tags)
		c.BlockDevices = slices.Clone(c.BlockDevices)
		out = append(out, c)
	}
	return out
}

// imageAction runs one of this file's actions; the caller holds tw.mu.
func (tw *Twin) imageAction(req request) (any, *apiError) {
	switch req.action {
	case "RegisterImage":
		return tw.registerImage(req)
	case "CopyImage":
		return tw.copyImage(req)
	case "DeregisterImage":
		return tw.deregisterImage(req)
	case "DescribeSnapshots":
		return tw.describeSnapshots(req)
	}
	return tw.deleteSnapshot(req)
}

var (
	bootModes   = []string{"legacy-bios", "uefi", "uefi-preferred"}
	imageArches = []string{"i386", "x86_64", "arm64", "x86_64_mac", "arm64_mac"}
)

func (tw *Twin) registerImage(req request) (any, *apiError) {
	f := req.form
	name := f.Get("Name")
	if name == "" {
		return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter name")
	}
	if f.Has("ImageLocation") {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterCombination", "the twin registers EBS-backed images only: give BlockDeviceMapping, not ImageLocation")
	}
	for _, img := range tw.images {
		if img.Region == req.region && img.Name == name {
			return nil, errorf(http.StatusBadRequest, "InvalidAMIName.Duplicate", "AMI name %s is already in use by AMI %s", name, img.ID)
		}
	}
	r := Registration{Description: f.Get("Description"), Architecture: f.Get("Architecture"), RootDeviceName: f.Get("RootDeviceName"),
		BootMode: f.Get("BootMode"), VirtualizationType: f.Get("VirtualizationType"), ImdsSupport: f.Get("ImdsSupport"),
		EnaSupport: f.Get("EnaSupport") == "true", Created: tw.opts.Now()}
	if r.Architecture == "" {
		r.Architecture = "i386" // EC2's default
	}
	if !slices.Contains(imageArches, r.Architecture) {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Value (%s) for parameter architecture is invalid.", r.Architecture)
	}
	if r.BootMode != "" && !slices.Contains(bootModes, r.BootMode) {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Value (%s) for parameter bootMode is invalid.", r.BootMode)
	}
	if r.ImdsSupport != "" && r.ImdsSupport != "v2.0" {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Value (%s) for parameter imdsSupport is invalid.", r.ImdsSupport)
	}
	for i := 1; f.Has(fmt.Sprintf("BlockDeviceMapping.%d.DeviceName", i)); i++ {
		k := fmt.Sprintf("BlockDeviceMapping.%d.", i)
		b := BlockDevice{DeviceName: f.Get(k + "DeviceName"), SnapshotID: f.Get(k + "Ebs.SnapshotId"),
			VolumeType: f.Get(k + "Ebs.VolumeType"), DeleteOnTermination: f.Get(k+"Ebs.DeleteOnTermination") != "false"}
		s, ok := tw.ebs.snapshots[b.SnapshotID]
		if !ok || s.Region != req.region {
			return nil, errorf(http.StatusBadRequest, "InvalidSnapshot.NotFound", "The snapshot '%s' does not exist.", b.SnapshotID)
		}
		tw.advanceSnapshot(s)
		if s.State != SnapshotCompleted {
			return nil, errorf(http.StatusBadRequest, "IncorrectState", "Snapshot '%s' is not 'completed'.", s.ID)
		}
		b.VolumeSize = s.VolumeSize
		if v := f.Get(k + "Ebs.VolumeSize"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < s.VolumeSize {
				return nil, errorf(http.StatusBadRequest, "InvalidBlockDeviceMapping", "Volume of size %s GiB is smaller than snapshot '%s', expect size >= %d GiB", v, s.ID, s.VolumeSize)
			}
			b.VolumeSize = n
		}
		if b.VolumeType == "" {
			b.VolumeType = "gp2"
		}
		r.BlockDevices = append(r.BlockDevices, b)
	}
	if len(r.BlockDevices) == 0 || !slices.ContainsFunc(r.BlockDevices, func(b BlockDevice) bool { return b.DeviceName == r.RootDeviceName }) {
		return nil, errorf(http.StatusBadRequest, "InvalidBlockDeviceMapping", "The root device name %q is not in the block device mapping.", r.RootDeviceName)
	}
	tags := resourceTags(f, "image")
	return &imageIDResponse{XMLName: xml.Name{Local: "RegisterImageResponse"}, ImageID: tw.newImage(req.region, name, tags, r)}, nil
}

// newImage records an AMI; the caller holds tw.mu.
func (tw *Twin) newImage(region, name string, tags map[string]string, r Registration) string {
	tw.seq++
	id := fmt.Sprintf("ami-%017x", tw.seq)
	tw.images[id] = &Image{ID: id, Region: region, Name: name, Tags: tags, Registration: r}
	return id
}

// copyImage copies an AMI, and the snapshots behind it, into the region of the request, as
// EC2's CopyImage does when it is called on the destination region's endpoint.
func (tw *Twin) copyImage(req request) (any, *apiError) {
	f := req.form
	srcRegion, srcID, name := f.Get("SourceRegion"), f.Get("SourceImageId"), f.Get("Name")
	if srcRegion == "" || srcID == "" || name == "" {
		return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameters SourceRegion, SourceImageId and Name")
	}
	answer := func(id string) *imageIDResponse {
		return &imageIDResponse{XMLName: xml.Name{Local: "CopyImageResponse"}, ImageID: id}
	}
	token := f.Get("ClientToken")
	if id, ok := tw.ebs.tokens[req.region+"/"+token]; token != "" && ok {
		return answer(id), nil
	}
	src, ok := tw.images[srcID]
	if !ok || src.Region != srcRegion {
		return nil, errorf(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", srcID)
	}
	r := src.Registration
	r.SourceImageID, r.SourceRegion, r.Created = srcID, srcRegion, tw.opts.Now()
	r.BlockDevices = slices.Clone(r.BlockDevices)
	if d := f.Get("Description"); d != "" {
		r.Description = d
	}
	for i, b := range r.BlockDevices {
		s := tw.ebs.snapshots[b.SnapshotID]
		tw.seq++
		c := &Snapshot{ID: fmt.Sprintf("snap-%017x", tw.seq), Region: req.region, VolumeSize: s.VolumeSize,
			Description: fmt.Sprintf("Copied for DestinationAmi from SourceAmi %s for SourceSnapshot %s", srcID, s.ID),
			Tags:        map[string]string{}, State: SnapshotCompleted, StartTime: tw.opts.Now(), Blocks: maps.Clone(s.Blocks)}
		tw.ebs.snapshots[c.ID] = c
		r.BlockDevices[i].SnapshotID = c.ID
	}
	tags := resourceTags(f, "image")
	if f.Get("CopyImageTags") == "true" {
		tags = maps.Clone(src.Tags)
		maps.Copy(tags, resourceTags(f, "image"))
	}
	id := tw.newImage(req.region, name, tags, r)
	if token != "" {
		tw.ebs.tokens[req.region+"/"+token] = id
	}
	return answer(id), nil
}

func (tw *Twin) deregisterImage(req request) (any, *apiError) {
	id := req.form.Get("ImageId")
	img, ok := tw.images[id]
	if !ok || img.Region != req.region {
		return nil, errorf(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", id)
	}
	delete(tw.images, id)
	return &returnResponse{XMLName: xml.Name{Local: "DeregisterImageResponse"}, Return: true}, nil
}

var snapshotFilters = []string{"snapshot-id", "status", "tag-key"}

func (tw *Twin) describeSnapshots(req request) (any, *apiError) {
	ids := list(req.form, "SnapshotId")
	filters, aerr := parseFilters(req.form, snapshotFilters)
	if aerr != nil {
		return nil, aerr
	}
	out := &describeSnapshotsResponse{}
	for _, id := range ids {
		if s, ok := tw.ebs.snapshots[id]; !ok || s.Region != req.region {
			return nil, errorf(http.StatusBadRequest, "InvalidSnapshot.NotFound", "The snapshot '%s' does not exist.", id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(tw.ebs.snapshots)) {
		s := tw.ebs.snapshots[id]
		if s.Region != req.region || len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		tw.advanceSnapshot(s)
		if !filters.match(fields{tags: s.Tags, values: map[string]string{"snapshot-id": id, "status": s.State}}) {
			continue
		}
		progress := "0%"
		if s.State == SnapshotCompleted {
			progress = "100%"
		}
		out.Snapshots = append(out.Snapshots, xmlSnapshot{SnapshotID: id, VolumeID: "vol-ffffffff", Status: s.State,
			StartTime: isoTime(s.StartTime), Progress: progress, OwnerID: OwnerID, VolumeSize: s.VolumeSize,
			Description: s.Description, Tags: xmlTags(s.Tags)})
	}
	return out, nil
}

func (tw *Twin) deleteSnapshot(req request) (any, *apiError) {
	id := req.form.Get("SnapshotId")
	s, ok := tw.ebs.snapshots[id]
	if !ok || s.Region != req.region {
		return nil, errorf(http.StatusBadRequest, "InvalidSnapshot.NotFound", "The snapshot '%s' does not exist.", id)
	}
	for _, img := range slices.Sorted(maps.Keys(tw.images)) {
		for _, b := range tw.images[img].BlockDevices {
			if b.SnapshotID == id {
				return nil, errorf(http.StatusBadRequest, "InvalidSnapshot.InUse", "The snapshot %s is currently in use by %s", id, img)
			}
		}
	}
	delete(tw.ebs.snapshots, id)
	for k, v := range tw.ebs.tokens {
		if v == id {
			delete(tw.ebs.tokens, k)
		}
	}
	return &returnResponse{XMLName: xml.Name{Local: "DeleteSnapshotResponse"}, Return: true}, nil
}
