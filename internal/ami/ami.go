// Package ami registers a node image's raw disk (package disk) as an Amazon Machine Image
// without S3: the EBS direct APIs write the disk's blocks into a new snapshot (each block with its
// SHA-256, all-zero blocks skipped, holes not even read), EC2 registers an AMI from the snapshot
// (UEFI, ENA, x86_64, IMDSv2), and CopyImage copies it to other regions.
//
// The AMI carries the node image's digest in the tag herd.dev/image, the tag the aws provider
// looks its default AMI up by; a push finds an AMI already tagged with the digest in a region and
// reuses it, so that pushing again registers nothing new. A push that fails or is interrupted
// deletes the snapshot it started, so that nothing is left to pay for.
package ami

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ebs"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/errgroup"

	"herd.dev/herd/internal/awsbody"
)

// Tags on the AMI and its snapshot.
const (
	// TagImage holds the node image's digest: the aws provider's default ami is the AMI of the
	// account tagged with the digest of the image an instance boots.
	TagImage = "herd.dev/image"
	// TagVersion is the version of herd that pushed the AMI.
	TagVersion = "herd.dev/version"
	tagName    = "Name"
)

// The AMI's root device.
const rootDevice = "/dev/xvda"

// ec2API is every EC2 action a push or a lookup calls; docs/aws.md's policy for herd image push
// allows exactly these and ebsAPI's, and a test keeps them in step.
type ec2API interface {
	DescribeImages(context.Context, *ec2.DescribeImagesInput, ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
	DescribeSnapshots(context.Context, *ec2.DescribeSnapshotsInput, ...func(*ec2.Options)) (*ec2.DescribeSnapshotsOutput, error)
	RegisterImage(context.Context, *ec2.RegisterImageInput, ...func(*ec2.Options)) (*ec2.RegisterImageOutput, error)
	CopyImage(context.Context, *ec2.CopyImageInput, ...func(*ec2.Options)) (*ec2.CopyImageOutput, error)
	DeleteSnapshot(context.Context, *ec2.DeleteSnapshotInput, ...func(*ec2.Options)) (*ec2.DeleteSnapshotOutput, error)
}

// ebsAPI is every action of the EBS direct APIs a push calls.
type ebsAPI interface {
	StartSnapshot(context.Context, *ebs.StartSnapshotInput, ...func(*ebs.Options)) (*ebs.StartSnapshotOutput, error)
	PutSnapshotBlock(context.Context, *ebs.PutSnapshotBlockInput, ...func(*ebs.Options)) (*ebs.PutSnapshotBlockOutput, error)
	CompleteSnapshot(context.Context, *ebs.CompleteSnapshotInput, ...func(*ebs.Options)) (*ebs.CompleteSnapshotOutput, error)
}

// Actions are the IAM actions a push can call ("ec2:RegisterImage", "ebs:PutSnapshotBlock", ...).
func Actions() []string {
	var out []string
	for prefix, t := range map[string]reflect.Type{"ec2:": reflect.TypeFor[ec2API](), "ebs:": reflect.TypeFor[ebsAPI]()} {
		for i := range t.NumMethod() {
			out = append(out, prefix+t.Method(i).Name)
		}
	}
	return out
}

// AWS is how to reach AWS: the SDK's default credential chain and endpoints unless set.
type AWS struct {
	// Endpoint, when set, is the URL of EC2's and the EBS direct APIs' endpoint (the twin, an
	// EC2-compatible cloud).
	Endpoint string
	// Credentials, when set, replace the SDK's default credential chain.
	Credentials aws.CredentialsProvider
	// HTTPClient, when set, sends the requests.
	HTTPClient aws.HTTPClient
}

func (a AWS) config(ctx context.Context, region string) (aws.Config, error) {
	loads := []func(*config.LoadOptions) error{config.WithRegion(region)}
	if a.Credentials != nil {
		loads = append(loads, config.WithCredentialsProvider(a.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return cfg, fmt.Errorf("load the AWS configuration for %s: %w", region, err)
	}
	return cfg, nil
}

func (a AWS) ec2(ctx context.Context, region string) (ec2API, error) {
	cfg, err := a.config(ctx, region)
	if err != nil {
		return nil, err
	}
	return ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		if a.Endpoint != "" {
			o.BaseEndpoint = aws.String(a.Endpoint)
		}
		if a.HTTPClient != nil {
			o.HTTPClient = a.HTTPClient
		}
		o.HTTPClient = awsbody.Wrap(o.HTTPClient)
	}), nil
}

func (a AWS) ebs(ctx context.Context, region string) (ebsAPI, error) {
	cfg, err := a.config(ctx, region)
	if err != nil {
		return nil, err
	}
	return ebs.NewFromConfig(cfg, func(o *ebs.Options) {
		if a.Endpoint != "" {
			o.BaseEndpoint = aws.String(a.Endpoint)
		}
		if a.HTTPClient != nil {
			o.HTTPClient = a.HTTPClient
		}
		o.HTTPClient = awsbody.Wrap(o.HTTPClient)
	}), nil
}

// Image is an AMI registered for a node image.
type Image struct {
	Region string `json:"region"`
	ID     string `json:"id"`
	Name   string `json:"name"`
	State  string `json:"state"`
	// Reused is set by Push when the AMI was there before it.
	Reused bool `json:"-"`
}

// find returns the AMIs of the account in region tagged with the node image digest.
func find(ctx context.Context, api ec2API, region, digest string) ([]Image, error) {
	images, err := describe(ctx, api, region, types.Filter{Name: aws.String("tag:" + TagImage), Values: []string{digest}})
	return images[digest], err
}

// List returns the AMIs of the account in region tagged with a node image digest, by digest:
// one call whatever the number of node images.
func List(ctx context.Context, a AWS, region string) (map[string][]Image, error) {
	api, err := a.ec2(ctx, region)
	if err != nil {
		return nil, err
	}
	return describe(ctx, api, region, types.Filter{Name: aws.String("tag-key"), Values: []string{TagImage}})
}

func describe(ctx context.Context, api ec2API, region string, filter types.Filter) (map[string][]Image, error) {
	out, err := api.DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: []string{"self"}, Filters: []types.Filter{filter}})
	if err != nil {
		return nil, fmt.Errorf("find herd's AMIs in %s: %w", region, explain(err))
	}
	images := map[string][]Image{}
	for _, im := range out.Images {
		for _, t := range im.Tags {
			if aws.ToString(t.Key) == TagImage {
				d := aws.ToString(t.Value)
				images[d] = append(images[d], Image{Region: region, ID: aws.ToString(im.ImageId), Name: aws.ToString(im.Name), State: string(im.State)})
			}
		}
	}
	return images, nil
}

// Options are a push's inputs.
type Options struct {
	AWS
	// Disk is the raw disk file (herd image disk). Required.
	Disk string
	// Image is the node image's digest ("sha256:..."), and Name its name. Required.
	Image, Name string
	// Version is herd's version, written in a tag.
	Version string
	// Region is where the AMI is registered; CopyTo the regions it is copied to. Region is
	// required.
	Region string
	CopyTo []string
	// Parallel bounds the blocks sent at once. Default: 16.
	Parallel int
	// Progress, when set, is called as blocks are sent or skipped.
	Progress func(Progress)
}

// Progress is how far the upload of a disk's blocks is.
type Progress struct {
	// Done is the blocks sent or skipped (all zeros) of Total, the blocks of the disk that hold
	// data; the disk's holes are not counted.
	Done, Sent, Total int
	// Bytes is the bytes sent, over Elapsed.
	Bytes   int64
	Elapsed time.Duration
}

// Result is what a push did.
type Result struct {
	// Images are the AMIs, Region's first, then CopyTo's in order.
	Images []Image
	// Snapshot is the snapshot written, Sent and Skipped its blocks; empty when Region's AMI was
	// reused.
	Snapshot      string
	Sent, Skipped int
}

func (o *Options) check() error {
	var errs []error
	if o.Disk == "" {
		errs = append(errs, errors.New("no disk: make one with herd image disk"))
	}
	if !strings.HasPrefix(o.Image, "sha256:") || o.Name == "" {
		errs = append(errs, errors.New("no node image digest and name"))
	}
	if o.Region == "" {
		errs = append(errs, errors.New("no region: give --region, such as eu-west-1"))
	}
	for _, r := range o.CopyTo {
		if r == o.Region || r == "" {
			errs = append(errs, fmt.Errorf("--copy-to %q: want other regions than --region %s", r, o.Region))
		}
	}
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	return errors.Join(errs...)
}

// amiName is the AMI's name, unique in a region for a node image.
func (o *Options) amiName() string {
	return "herd-" + o.Name + "-" + strings.TrimPrefix(o.Image, "sha256:")[:12]
}

// Push registers the disk as an AMI in Region, unless one is there for the node image, and
// copies it to the CopyTo regions that have none.
func Push(ctx context.Context, o Options) (Result, error) {
	if err := o.check(); err != nil {
		return Result{}, err
	}
	home, err := o.ec2(ctx, o.Region)
	if err != nil {
		return Result{}, err
	}
	var res Result
	found, err := find(ctx, home, o.Region, o.Image)
	if err != nil {
		return res, err
	}
	var source Image
	if len(found) > 0 {
		source = found[0]
		source.Reused = true
	} else {
		eb, err := o.ebs(ctx, o.Region)
		if err != nil {
			return res, err
		}
		if source, err = o.register(ctx, home, eb, &res); err != nil {
			return res, err
		}
	}
	res.Images = append(res.Images, source)
	copies := make([]Image, len(o.CopyTo))
	var g errgroup.Group
	for i, region := range o.CopyTo {
		g.Go(func() error {
			im, err := o.copy(ctx, region, source)
			copies[i] = im
			return err
		})
	}
	err = g.Wait()
	res.Images = append(res.Images, copies...)
	return res, err
}

// register writes the snapshot and registers the AMI; the snapshot is deleted unless an AMI was
// registered from it.
func (o *Options) register(ctx context.Context, api ec2API, eb ebsAPI, res *Result) (im Image, err error) {
	tags := map[string]string{TagImage: o.Image, TagVersion: o.Version, tagName: o.amiName()}
	u, err := openUpload(o.Disk)
	if err != nil {
		return im, err
	}
	defer u.close()
	var ebsTags []ebsTag
	for k, v := range tags {
		ebsTags = append(ebsTags, ebsTag{Key: aws.String(k), Value: aws.String(v)})
	}
	start, err := eb.StartSnapshot(ctx, &ebs.StartSnapshotInput{VolumeSize: aws.Int64(u.volumeGiB()), Tags: ebsTags,
		Description: aws.String("herd node image " + o.Name + " " + o.Image), Timeout: aws.Int32(60)})
	if err != nil {
		return im, fmt.Errorf("start the snapshot in %s: %w", o.Region, explain(err))
	}
	snap := aws.ToString(start.SnapshotId)
	res.Snapshot = snap
	defer func() {
		if err != nil {
			err = errors.Join(err, deleteSnapshot(ctx, api, snap))
			res.Snapshot = ""
		}
	}()
	if err = u.send(ctx, eb, snap, o.Parallel, o.Progress); err != nil {
		return im, err
	}
	res.Sent, res.Skipped = u.sent, u.skipped
	if _, err = eb.CompleteSnapshot(ctx, u.completion(snap)); err != nil {
		return im, fmt.Errorf("complete snapshot %s: %w", snap, explain(err))
	}
	w := ec2.NewSnapshotCompletedWaiter(api, func(w *ec2.SnapshotCompletedWaiterOptions) { w.MinDelay, w.MaxDelay = 2*time.Second, 30*time.Second })
	if err = w.Wait(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{snap}}, time.Hour); err != nil {
		return im, fmt.Errorf("wait for snapshot %s to complete: %w", snap, explain(err))
	}
	out, err := api.RegisterImage(ctx, &ec2.RegisterImageInput{
		Name: aws.String(o.amiName()), Description: aws.String("herd node image " + o.Name + " " + o.Image),
		Architecture: types.ArchitectureValuesX8664, BootMode: types.BootModeValuesUefi, EnaSupport: aws.Bool(true),
		ImdsSupport: types.ImdsSupportValuesV20, VirtualizationType: aws.String("hvm"), RootDeviceName: aws.String(rootDevice),
		BlockDeviceMappings: []types.BlockDeviceMapping{{DeviceName: aws.String(rootDevice),
			Ebs: &types.EbsBlockDevice{SnapshotId: aws.String(snap), VolumeType: types.VolumeTypeGp3, DeleteOnTermination: aws.Bool(true)}}},
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeImage, Tags: ec2Tags(tags)}},
	})
	if err != nil {
		return im, fmt.Errorf("register the AMI in %s: %w", o.Region, explain(err))
	}
	return Image{Region: o.Region, ID: aws.ToString(out.ImageId), Name: o.amiName(), State: "available"}, nil
}

// deleteSnapshot deletes a snapshot a failed push leaves, even when ctx was cancelled (an
// interrupted push).
func deleteSnapshot(ctx context.Context, api ec2API, snap string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, err := api.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String(snap)}); err != nil {
		return fmt.Errorf("delete the unfinished snapshot %s (delete it by hand): %w", snap, explain(err))
	}
	return nil
}

// copy copies source to region unless an AMI of the node image is there.
func (o *Options) copy(ctx context.Context, region string, source Image) (Image, error) {
	api, err := o.ec2(ctx, region)
	if err != nil {
		return Image{Region: region}, err
	}
	found, err := find(ctx, api, region, o.Image)
	if err != nil || len(found) > 0 {
		if len(found) > 0 {
			found[0].Reused = true
			return found[0], nil
		}
		return Image{Region: region}, err
	}
	// The client token makes a copy asked again (a lost answer, a second push before the first
	// copy is tagged) the same copy.
	token := sha256.Sum256([]byte(o.Image + "/" + source.ID + "/" + region))
	out, err := api.CopyImage(ctx, &ec2.CopyImageInput{SourceRegion: aws.String(o.Region), SourceImageId: aws.String(source.ID),
		Name: aws.String(o.amiName()), Description: aws.String("herd node image " + o.Name + " " + o.Image),
		CopyImageTags: aws.Bool(true), ClientToken: aws.String(hex.EncodeToString(token[:16]))})
	if err != nil {
		return Image{Region: region}, fmt.Errorf("copy %s to %s: %w", source.ID, region, explain(err))
	}
	return Image{Region: region, ID: aws.ToString(out.ImageId), Name: o.amiName(), State: "pending"}, nil
}

func ec2Tags(tags map[string]string) []types.Tag {
	var out []types.Tag
	for k, v := range tags {
		out = append(out, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	return out
}

// explain names the IAM action to allow when AWS refused one.
func explain(err error) error {
	var api smithy.APIError
	var op *smithy.OperationError
	if !errors.As(err, &api) || !errors.As(err, &op) {
		return err
	}
	switch api.ErrorCode() {
	case "UnauthorizedOperation", "AccessDeniedException":
		return fmt.Errorf("the credentials may not call %s:%s: allow it in their IAM policy (docs/aws.md has herd image push's): %w",
			strings.ToLower(op.ServiceID), op.OperationName, err)
	case "AuthFailure", "UnrecognizedClientException":
		return fmt.Errorf("AWS refused the credentials (check the SDK's credential chain: environment, profile, instance role): %w", err)
	}
	return err
}
