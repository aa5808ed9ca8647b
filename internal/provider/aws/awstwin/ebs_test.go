package awstwin_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ebs"
	ebstypes "github.com/aws/aws-sdk-go-v2/service/ebs/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"herd.dev/herd/internal/provider/aws/awstwin"
)

func block(fill byte) []byte { return bytes.Repeat([]byte{fill}, awstwin.BlockSize) }

func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// aggregate is the LINEAR aggregation of blocks' checksums, in block order.
func aggregate(blocks ...[]byte) string {
	h := sha256.New()
	for _, b := range blocks {
		sum := sha256.Sum256(b)
		h.Write(sum[:])
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

func put(ctx context.Context, c *ebs.Client, snap string, index int32, data []byte, sum string) error {
	_, err := c.PutSnapshotBlock(ctx, &ebs.PutSnapshotBlockInput{SnapshotId: aws.String(snap), BlockIndex: aws.Int32(index),
		BlockData: bytes.NewReader(data), DataLength: aws.Int32(int32(len(data))),
		Checksum: aws.String(sum), ChecksumAlgorithm: ebstypes.ChecksumAlgorithmChecksumAlgorithmSha256})
	return err
}

// The SDK's EBS client writes a snapshot block by block through the twin's REST-JSON protocol:
// a block whose data does not match its checksum is refused and not kept, a wrong aggregated
// checksum refuses the completion, the blocks read back are the ones written, and EC2 registers
// an AMI from the snapshot, finds it by tag, copies it to another region and refuses to delete a
// snapshot an AMI uses.
func TestEBSDirectAPIsAndImages(t *testing.T) {
	tw := awstwin.New(t, awstwin.Options{})
	c := tw.EBSClient(region)
	ctx := context.Background()
	start, err := c.StartSnapshot(ctx, &ebs.StartSnapshotInput{VolumeSize: aws.Int64(1), ClientToken: aws.String("tok"),
		Tags: []ebstypes.Tag{{Key: aws.String("herd.dev/image"), Value: aws.String("sha256:abc")}}})
	if err != nil {
		t.Fatal(err)
	}
	snap := aws.ToString(start.SnapshotId)
	if start.Status != ebstypes.StatusPending || aws.ToInt32(start.BlockSize) != awstwin.BlockSize {
		t.Fatalf("StartSnapshot: %s with blocks of %d, want pending with blocks of 512 KiB", start.Status, aws.ToInt32(start.BlockSize))
	}
	if again, err := c.StartSnapshot(ctx, &ebs.StartSnapshotInput{VolumeSize: aws.Int64(1), ClientToken: aws.String("tok")}); err != nil || aws.ToString(again.SnapshotId) != snap {
		t.Fatalf("StartSnapshot with the same client token: %v, %v; want %s again", again, err, snap)
	}
	a, b := block('a'), block('b')
	if err := put(ctx, c, snap, 0, a, checksum(a)); err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(b)
	corrupt[1000] ^= 1
	var verr *ebstypes.ValidationException
	if err := put(ctx, c, snap, 3, corrupt, checksum(b)); !errorAs(err, &verr) || verr.Reason != ebstypes.ValidationExceptionReasonInvalidBlock {
		t.Fatalf("a block whose data does not match its checksum: %v, want ValidationException INVALID_BLOCK", err)
	}
	if err := put(ctx, c, snap, 2048, a, checksum(a)); !errorAs(err, &verr) || verr.Reason != ebstypes.ValidationExceptionReasonInvalidParameterValue {
		t.Fatalf("a block beyond the volume: %v, want ValidationException INVALID_PARAMETER_VALUE", err)
	}
	if err := put(ctx, c, snap, 3, b, checksum(b)); err != nil {
		t.Fatal(err)
	}
	complete := func(sum string) error {
		_, err := c.CompleteSnapshot(ctx, &ebs.CompleteSnapshotInput{SnapshotId: aws.String(snap), ChangedBlocksCount: aws.Int32(2),
			Checksum: aws.String(sum), ChecksumAlgorithm: ebstypes.ChecksumAlgorithmChecksumAlgorithmSha256,
			ChecksumAggregationMethod: ebstypes.ChecksumAggregationMethodChecksumAggregationLinear})
		return err
	}
	if err := complete(aggregate(b, a)); !errorAs(err, &verr) {
		t.Fatalf("CompleteSnapshot with the checksums out of block order: %v, want ValidationException", err)
	}
	if err := complete(aggregate(a, b)); err != nil {
		t.Fatal(err)
	}
	listed, err := c.ListSnapshotBlocks(ctx, &ebs.ListSnapshotBlocksInput{SnapshotId: aws.String(snap)})
	if err != nil || len(listed.Blocks) != 2 || aws.ToInt32(listed.Blocks[1].BlockIndex) != 3 {
		t.Fatalf("ListSnapshotBlocks: %+v, %v; want blocks 0 and 3", listed, err)
	}
	got, err := c.GetSnapshotBlock(ctx, &ebs.GetSnapshotBlockInput{SnapshotId: aws.String(snap), BlockIndex: aws.Int32(3), BlockToken: listed.Blocks[1].BlockToken})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(got.BlockData)
	if !bytes.Equal(data, b) || aws.ToString(got.Checksum) != checksum(b) {
		t.Fatal("block 3 read back is not the one written")
	}
	if err := put(ctx, c, snap, 1, a, checksum(a)); !errorAs(err, &verr) {
		t.Fatalf("a block written after completion: %v, want ValidationException", err)
	}

	e := tw.Client(region)
	reg, err := e.RegisterImage(ctx, &ec2.RegisterImageInput{Name: aws.String("herd-hello"), Architecture: types.ArchitectureValuesX8664,
		RootDeviceName: aws.String("/dev/xvda"), BootMode: types.BootModeValuesUefi, EnaSupport: aws.Bool(true),
		VirtualizationType: aws.String("hvm"), ImdsSupport: types.ImdsSupportValuesV20,
		BlockDeviceMappings: []types.BlockDeviceMapping{{DeviceName: aws.String("/dev/xvda"),
			Ebs: &types.EbsBlockDevice{SnapshotId: aws.String(snap), VolumeType: types.VolumeTypeGp3, DeleteOnTermination: aws.Bool(true)}}},
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeImage,
			Tags: []types.Tag{{Key: aws.String("herd.dev/image"), Value: aws.String("sha256:abc")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ami := aws.ToString(reg.ImageId)
	byTag := func(region string) []types.Image {
		t.Helper()
		out, err := tw.Client(region).DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: []string{"self"},
			Filters: []types.Filter{{Name: aws.String("tag:herd.dev/image"), Values: []string{"sha256:abc"}}}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Images
	}
	images := byTag(region)
	if len(images) != 1 || aws.ToString(images[0].ImageId) != ami {
		t.Fatalf("DescribeImages by tag: %+v, want %s", images, ami)
	}
	im := images[0]
	if im.BootMode != types.BootModeValuesUefi || !aws.ToBool(im.EnaSupport) || im.Architecture != types.ArchitectureValuesX8664 ||
		im.ImdsSupport != types.ImdsSupportValuesV20 || len(im.BlockDeviceMappings) != 1 ||
		aws.ToString(im.BlockDeviceMappings[0].Ebs.SnapshotId) != snap || aws.ToInt32(im.BlockDeviceMappings[0].Ebs.VolumeSize) != 1 {
		t.Fatalf("the registered AMI: %+v", im)
	}
	if _, err := e.RegisterImage(ctx, &ec2.RegisterImageInput{Name: aws.String("herd-hello"), RootDeviceName: aws.String("/dev/xvda"),
		BlockDeviceMappings: []types.BlockDeviceMapping{{DeviceName: aws.String("/dev/xvda"), Ebs: &types.EbsBlockDevice{SnapshotId: aws.String(snap)}}}}); code(err) != "InvalidAMIName.Duplicate" {
		t.Fatalf("a second AMI of the same name: %v, want InvalidAMIName.Duplicate", err)
	}
	if _, err := e.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String(snap)}); code(err) != "InvalidSnapshot.InUse" {
		t.Fatalf("deleting the AMI's snapshot: %v, want InvalidSnapshot.InUse", err)
	}

	const other = "us-east-1"
	cp := &ec2.CopyImageInput{SourceRegion: aws.String(region), SourceImageId: aws.String(ami), Name: aws.String("herd-hello"),
		CopyImageTags: aws.Bool(true), ClientToken: aws.String("copy-1")}
	copied, err := tw.Client(other).CopyImage(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := tw.Client(other).CopyImage(ctx, cp); err != nil || aws.ToString(again.ImageId) != aws.ToString(copied.ImageId) {
		t.Fatalf("CopyImage with the same client token: %v, %v; want %s again", again, err, aws.ToString(copied.ImageId))
	}
	images = byTag(other)
	if len(images) != 1 || aws.ToString(images[0].ImageId) != aws.ToString(copied.ImageId) || images[0].BootMode != types.BootModeValuesUefi {
		t.Fatalf("the copy in %s: %+v, want %s with the source's tags and boot mode", other, images, aws.ToString(copied.ImageId))
	}
	snaps, err := tw.Client(other).DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}})
	if err != nil || len(snaps.Snapshots) != 1 || snaps.Snapshots[0].State != types.SnapshotStateCompleted ||
		aws.ToString(snaps.Snapshots[0].SnapshotId) != aws.ToString(images[0].BlockDeviceMappings[0].Ebs.SnapshotId) {
		t.Fatalf("DescribeSnapshots in %s: %+v, %v; want the copy's completed snapshot", other, snaps, err)
	}
}

// A snapshot stays pending in EC2's view for SnapshotDelay after its completion, and EC2 refuses
// to register an AMI from it until it is completed; the SDK's waiter sees it complete.
func TestSnapshotCompletesAfterDelay(t *testing.T) {
	tw := awstwin.New(t, awstwin.Options{})
	tw.SnapshotDelay(200e6)
	c := tw.EBSClient(region)
	ctx := context.Background()
	start, err := c.StartSnapshot(ctx, &ebs.StartSnapshotInput{VolumeSize: aws.Int64(1)})
	if err != nil {
		t.Fatal(err)
	}
	snap := start.SnapshotId
	if _, err := c.CompleteSnapshot(ctx, &ebs.CompleteSnapshotInput{SnapshotId: snap, ChangedBlocksCount: aws.Int32(0)}); err != nil {
		t.Fatal(err)
	}
	e := tw.Client(region)
	if _, err := e.RegisterImage(ctx, &ec2.RegisterImageInput{Name: aws.String("early"), RootDeviceName: aws.String("/dev/xvda"),
		BlockDeviceMappings: []types.BlockDeviceMapping{{DeviceName: aws.String("/dev/xvda"), Ebs: &types.EbsBlockDevice{SnapshotId: snap}}}}); code(err) != "IncorrectState" {
		t.Fatalf("RegisterImage from a pending snapshot: %v, want IncorrectState", err)
	}
	w := ec2.NewSnapshotCompletedWaiter(e, func(o *ec2.SnapshotCompletedWaiterOptions) { o.MinDelay, o.MaxDelay = 50e6, 100e6 })
	if err := w.Wait(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{aws.ToString(snap)}}, 10e9); err != nil {
		t.Fatal(err)
	}
}

func errorAs[T error](err error, target *T) bool { return err != nil && errors.As(err, target) }
