package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"herd.dev/herd/internal/ami"
	"herd.dev/herd/internal/disk"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/version"
)

func newImagePushCmd(g *globals, store func() *image.Store) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "push",
		Short: "Register a node image's disk with a cloud",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newImagePushAWSCmd(g, store))
	return cmd
}

func newImagePushAWSCmd(g *globals, store func() *image.Store) *cobra.Command {
	var region, endpoint, diskPath string
	var copyTo []string
	var parallel int
	cmd := &cobra.Command{
		Use:   "aws NAME|DIGEST --region REGION [--copy-to R2,R3]",
		Short: "Register a node image's disk as an AMI, without S3",
		Long: `Register the raw disk that 'herd image disk' made of the node image as an Amazon Machine
Image: the EBS direct APIs write the disk's blocks into a new snapshot (512 KiB blocks sent in
parallel, each with its SHA-256; all-zero blocks skipped and the disk's holes not even read),
EC2 registers an AMI from it (x86_64, UEFI boot, ENA, IMDSv2 only) tagged herd.dev/image with
the node image's digest, and CopyImage copies it to each --copy-to region.

An AMI already tagged with the digest in a region is reused, never duplicated: pushing again
registers nothing. A push that fails or is interrupted deletes the snapshot it started. A
fleet's region with provider: aws and no ami option boots the AMI tagged with its image's
digest. Credentials come from the SDK's default chain; docs/aws.md has the IAM policy.`,
		Example: `  herd image disk hello -o hello.raw
  herd image push aws hello --region eu-west-1 --copy-to us-east-1,ap-southeast-2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if region == "" {
				return errors.New("--region is required: the AWS region to register the AMI in, such as eu-west-1")
			}
			b, err := resolveBundle(store(), args[0])
			if err != nil {
				return err
			}
			if diskPath == "" {
				diskPath = b.Config.Name + ".raw"
				if d, ok, err := disk.LoadRecord(filepath.Join(store().Root(), "disks"), b.Digest); err == nil && ok {
					diskPath = d.Path // the disk herd image disk made last
				}
			}
			if _, err := os.Stat(diskPath); err != nil {
				return fmt.Errorf("the disk: %w (make it with herd image disk %s, or give --disk)", err, args[0])
			}
			o := ami.Options{AWS: ami.AWS{Endpoint: endpoint}, Disk: diskPath, Image: b.Digest, Name: b.Config.Name,
				Version: version.Version, Region: region, CopyTo: copyTo, Parallel: parallel}
			if f, ok := g.errOut.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				o.Progress = progressLine(g, time.Second/4)
			}
			res, err := ami.Push(cmd.Context(), o)
			if o.Progress != nil && res.Snapshot != "" {
				fmt.Fprintln(g.errOut)
			}
			for _, im := range res.Images {
				if im.ID == "" {
					continue
				}
				how := "registered from " + res.Snapshot
				switch {
				case im.Reused:
					how = "reused"
				case im.Region != region:
					how = "copying"
				}
				fmt.Fprintf(g.out, "ami %s %s %s (%s)\n", im.Region, im.ID, im.Name, how)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&region, "region", "", "the AWS region to register the AMI in")
	cmd.Flags().StringSliceVar(&copyTo, "copy-to", nil, "other regions to copy the AMI to, separated by commas")
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "the URL of EC2's and EBS's API, for an EC2-compatible cloud or a twin (default AWS's own)")
	cmd.Flags().StringVar(&diskPath, "disk", "", "the raw disk to push (default the one herd image disk made last, or NAME.raw)")
	cmd.Flags().IntVar(&parallel, "parallel", 16, "blocks sent at once")
	return cmd
}

// progressLine rewrites one line on the terminal with the blocks sent and the rate, at most
// every interval.
func progressLine(g *globals, interval time.Duration) func(ami.Progress) {
	var mu sync.Mutex
	var last time.Time
	return func(p ami.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) < interval && p.Done < p.Total {
			return
		}
		last = time.Now()
		rate := float64(p.Bytes) / 1e6 / max(p.Elapsed.Seconds(), 1e-3)
		fmt.Fprintf(g.errOut, "\rblocks %d/%d (%d sent, %d all zeros) %.1f MB/s%s", p.Done, p.Total, p.Sent, p.Done-p.Sent, rate, strings.Repeat(" ", 4))
	}
}
