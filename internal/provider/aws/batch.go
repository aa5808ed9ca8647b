package aws

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// maxBatch is how many instance IDs one TerminateInstances or CreateTags takes: EC2's limit.
const maxBatch = 1000

// batchTimeout bounds one batched call, which runs for many callers and so on none's context.
const batchTimeout = time.Minute

// A batcher sends the IDs of concurrent calls in one EC2 call: the first call goes at once, and
// the calls that come while it is under way go together after it, up to maxBatch IDs, so that
// the deletes of a scale-down cost a few calls instead of one per instance. A batch that EC2
// refuses because one of its instances is not known yet (eventual consistency) is sent again call
// by call, so that one instance launched a moment ago does not fail the others.
type batcher struct {
	send func(ctx context.Context, ids []string) error

	mu      sync.Mutex
	pending []*batchCall
	running bool
}

type batchCall struct {
	ids  []string
	done chan error
}

// do sends ids in a batch and returns the batch's error.
func (b *batcher) do(ctx context.Context, ids []string) error {
	c := &batchCall{ids: ids, done: make(chan error, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run sends batches until no call is pending.
func (b *batcher) run() {
	for {
		calls := b.next()
		if len(calls) == 0 {
			return
		}
		var ids []string
		for _, c := range calls {
			ids = append(ids, c.ids...)
		}
		err := b.sendNow(ids)
		if err != nil && len(calls) > 1 && isAny(err, codeNotFound) {
			for _, c := range calls {
				c.done <- b.sendNow(c.ids)
			}
			continue
		}
		for _, c := range calls {
			c.done <- err
		}
	}
}

// next takes the pending calls of the next batch, or reports there is none (and stops running).
func (b *batcher) next() []*batchCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	var calls []*batchCall
	n := 0
	for len(b.pending) > 0 && (len(calls) == 0 || n+len(b.pending[0].ids) <= maxBatch) {
		n += len(b.pending[0].ids)
		calls = append(calls, b.pending[0])
		b.pending = b.pending[1:]
	}
	if len(calls) == 0 {
		b.running = false
	}
	return calls
}

func (b *batcher) sendNow(ids []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	return b.send(ctx, ids)
}

// batches are the batched calls of one target.
type batches struct {
	tagDeleting, terminate *batcher
}

// batchesOf returns the batched calls of target t on api, made on first use.
func (p *Provider) batchesOf(t target, api ec2API) *batches {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.batches[t]; ok {
		return b
	}
	b := &batches{
		tagDeleting: &batcher{send: func(ctx context.Context, ids []string) error {
			_, err := api.CreateTags(ctx, &ec2.CreateTagsInput{Resources: ids, Tags: []types.Tag{{Key: aws.String(tagDeleting), Value: aws.String("true")}}})
			return err
		}},
		terminate: &batcher{send: func(ctx context.Context, ids []string) error {
			_, err := api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
			return err
		}},
	}
	p.batches[t] = b
	return b
}
