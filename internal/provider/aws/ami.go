package aws

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"golang.org/x/sync/singleflight"
)

// codeAMINotFound is EC2's answer to a launch from an AMI that is not (or no longer) registered.
const codeAMINotFound = "InvalidAMIID.NotFound"

// amiCache keeps the AMI found for each image digest in each EC2 region (target), so that the
// launches of a scale-up ask DescribeImages once per digest and region, not once each: the
// launches that come while it is asked wait for its answer (singleflight), and the answer serves
// for AMIMaxAge, after which it is asked again, so that a new AMI registered for the digest is
// found. An AMI that a launch finds deregistered is forgotten at once.
type amiCache struct {
	group singleflight.Group
	mu    sync.Mutex
	found map[string]foundAMI // by amiKey
}

type foundAMI struct {
	id string
	at time.Time
}

func amiKey(t target, image string) string { return t.Endpoint + "|" + t.Region + "|" + image }

// ami is the region's ami option, or else the AMI of this account tagged with the image digest.
func (p *Provider) ami(ctx context.Context, api ec2API, o regionOptions, image string) (string, error) {
	if o.ami != "" {
		return o.ami, nil
	}
	key := amiKey(o.target, image)
	p.amis.mu.Lock()
	f, ok := p.amis.found[key]
	p.amis.mu.Unlock()
	if ok && p.opts.Now().Sub(f.at) < p.opts.AMIMaxAge {
		return f.id, nil
	}
	lookup := func() (any, error) {
		asked := p.opts.Now()
		out, err := api.DescribeImages(ctx, &ec2.DescribeImagesInput{
			Owners:  []string{"self"},
			Filters: []types.Filter{{Name: aws.String("tag:" + tagImage), Values: []string{image}}},
		})
		if err != nil {
			return "", fmt.Errorf("aws: find the AMI of image %s: %w", image, explain(err))
		}
		id := newestAMI(out.Images)
		if id == "" {
			return "", fmt.Errorf("aws: no AMI of this account in %s is tagged %s=%s: register the image's AMI with that tag (herd image push aws), or set the region's ami option", o.Region, tagImage, image)
		}
		p.amis.mu.Lock()
		p.amis.found[key] = foundAMI{id: id, at: asked}
		p.amis.mu.Unlock()
		return id, nil
	}
	v, err, shared := p.amis.group.Do(key, lookup)
	if err != nil && shared && ctx.Err() == nil {
		// Another launch's lookup failed (its retries ran out in a throttling storm, or its
		// context ended): this launch asks once on its own account rather than fail with it.
		v, err, _ = p.amis.group.Do(key, lookup)
	}
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

// newestAMI is the most recently created available (or pending) image of images, or "".
func newestAMI(images []types.Image) string {
	id, newest := "", ""
	for _, img := range images {
		if img.State != "" && img.State != types.ImageStateAvailable && img.State != types.ImageStatePending {
			continue
		}
		if c := aws.ToString(img.CreationDate); id == "" || c > newest {
			id, newest = aws.ToString(img.ImageId), c
		}
	}
	return id
}

// forgetAMI drops the AMI found for image in t, so that the next launch asks again.
func (p *Provider) forgetAMI(t target, image string) {
	p.amis.mu.Lock()
	defer p.amis.mu.Unlock()
	delete(p.amis.found, amiKey(t, image))
}
