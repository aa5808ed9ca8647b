package awstwin_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"herd.dev/herd/internal/provider/aws/awstwin"
)

// The AWS CLI writes a snapshot through the twin's EBS direct APIs (botocore signs the blocks'
// payload itself, where the Go SDK sends UNSIGNED-PAYLOAD), registers an AMI from it and copies it
// to another region; what the SDK reads of the copy agrees.
func TestAWSCLIPushesASnapshot(t *testing.T) {
	awsCLI(t)
	tw := awstwin.New(t, awstwin.Options{})
	dir := t.TempDir()
	data := block('h')
	file := filepath.Join(dir, "block")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}

	var start struct {
		SnapshotID string `json:"SnapshotId"`
		Status     string
		BlockSize  int
	}
	cliService(t, tw, &start, "ebs", "start-snapshot", "--volume-size", "1", "--tags", "Key=herd.dev/image,Value=sha256:cli")
	if start.Status != "pending" || start.BlockSize != 512<<10 {
		t.Fatalf("CLI start-snapshot: %+v", start)
	}
	cliService(t, tw, nil, "ebs", "put-snapshot-block", "--snapshot-id", start.SnapshotID, "--block-index", "5",
		"--block-data", file, "--data-length", "524288", "--checksum", checksum(data), "--checksum-algorithm", "SHA256")
	var done struct{ Status string }
	cliService(t, tw, &done, "ebs", "complete-snapshot", "--snapshot-id", start.SnapshotID, "--changed-blocks-count", "1",
		"--checksum", aggregate(data), "--checksum-algorithm", "SHA256", "--checksum-aggregation-method", "LINEAR")
	if done.Status != "completed" {
		t.Fatalf("CLI complete-snapshot: %+v", done)
	}
	var reg struct {
		ImageID string `json:"ImageId"`
	}
	cli(t, tw, &reg, "register-image", "--name", "herd-cli", "--architecture", "x86_64", "--root-device-name", "/dev/xvda",
		"--boot-mode", "uefi", "--ena-support", "--virtualization-type", "hvm", "--imds-support", "v2.0",
		"--block-device-mappings", "DeviceName=/dev/xvda,Ebs={SnapshotId="+start.SnapshotID+",VolumeType=gp3}",
		"--tag-specifications", "ResourceType=image,Tags=[{Key=herd.dev/image,Value=sha256:cli}]")
	var images struct {
		Images []struct {
			ImageID             string `json:"ImageId"`
			BootMode            string
			EnaSupport          bool
			BlockDeviceMappings []struct {
				DeviceName string
				Ebs        struct {
					SnapshotID string `json:"SnapshotId"`
					VolumeSize int
				}
			}
		}
	}
	cli(t, tw, &images, "describe-images", "--owners", "self", "--filters", "Name=tag:herd.dev/image,Values=sha256:cli")
	if len(images.Images) != 1 || images.Images[0].ImageID != reg.ImageID || images.Images[0].BootMode != "uefi" || !images.Images[0].EnaSupport ||
		len(images.Images[0].BlockDeviceMappings) != 1 || images.Images[0].BlockDeviceMappings[0].Ebs.SnapshotID != start.SnapshotID {
		t.Fatalf("CLI describe-images by tag: %+v, want %s from %s", images.Images, reg.ImageID, start.SnapshotID)
	}
	// Copied by the CLI to another region, read there by the SDK.
	const other = "us-east-1"
	var copied struct {
		ImageID string `json:"ImageId"`
	}
	cliService(t, tw, &copied, "ec2", "copy-image", "--region", other, "--source-region", region, "--source-image-id", reg.ImageID,
		"--name", "herd-cli", "--copy-image-tags", "--client-token", "cli-copy")
	d, err := tw.Client(other).DescribeImages(context.Background(), &ec2.DescribeImagesInput{Owners: []string{"self"},
		Filters: []types.Filter{{Name: aws.String("tag:herd.dev/image"), Values: []string{"sha256:cli"}}}})
	if err != nil || len(d.Images) != 1 || aws.ToString(d.Images[0].ImageId) != copied.ImageID || d.Images[0].BootMode != types.BootModeValuesUefi ||
		aws.ToString(d.Images[0].SourceImageId) != reg.ImageID || aws.ToString(d.Images[0].RootDeviceName) != "/dev/xvda" {
		t.Fatalf("the SDK reads the CLI's copy in %s as %+v, %v; want %s copied from %s", other, d.Images, err, copied.ImageID, reg.ImageID)
	}
}
