// Package route53sync keeps the record sets of an Amazon Route 53 hosted zone in step with herd's
// global routes (herd up --route53-zone): each fleet's spec.global hostname in the zone gets the
// record sets of the regions herd's own DNS would answer with, by the same policy and the same
// health verdicts, so that a region herd withdraws is withdrawn from the zone too.
//
// It touches only what it owns: a hostname is herd's when a TXT record set "_herd.<hostname>"
// names this installation (written with the first records, as external-dns marks its own), or
// when nothing answers at the hostname yet; a hostname with records of someone else is left as
// it is, with a warning. Changes go in batches through ChangeResourceRecordSets, one hostname's
// changes always in one batch so that its records and its owner record move together; the
// SDK's retryer retries PriorRequestNotComplete and throttling; GetChange follows the last change
// until Route 53 says INSYNC.
package route53sync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"

	"herd.dev/herd/internal/global/routes"
)

// API is the part of Route 53's client the syncer calls (*route53.Client).
type API interface {
	ListResourceRecordSets(context.Context, *route53.ListResourceRecordSetsInput, ...func(*route53.Options)) (*route53.ListResourceRecordSetsOutput, error)
	ChangeResourceRecordSets(context.Context, *route53.ChangeResourceRecordSetsInput, ...func(*route53.Options)) (*route53.ChangeResourceRecordSetsOutput, error)
	GetChange(context.Context, *route53.GetChangeInput, ...func(*route53.Options)) (*route53.GetChangeOutput, error)
}

// Defaults of Options.
const (
	DefaultInterval = time.Second
	DefaultResync   = time.Minute
	// DefaultMaxBatch is Route 53's limit of ResourceRecord elements in one change batch (an
	// UPSERT's count twice).
	DefaultMaxBatch = 1000
)

// Options configure a Syncer.
type Options struct {
	// ZoneID is the hosted zone's ID (Z...). Required.
	ZoneID string
	// Installation is this herd's installation id, written in the owner records. Required.
	Installation string
	Client       API
	// Table gives herd's routes (routes.Live.Table).
	Table func(context.Context) (routes.Table, error)
	// AWSRegions maps herd regions to AWS regions for latency records. Default: the herd name.
	AWSRegions map[string]string
	// Interval is how often the routes are read; the zone is changed only when what herd keeps
	// in it changed. Default: DefaultInterval.
	Interval time.Duration
	// Resync is how often the zone is listed and put back in step even when nothing changed
	// (a record edited by hand). Default: DefaultResync.
	Resync time.Duration
	// MaxBatch is the most ResourceRecord elements in one change batch. Default: DefaultMaxBatch.
	MaxBatch int
	Logger   *slog.Logger
}

// Syncer keeps a hosted zone in step with herd's routes.
type Syncer struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	pending string // the last change submitted, until Route 53 says INSYNC
	insync  bool
	warned  map[string]string // hostname: the last warning logged about it
}

// New checks opts and returns a Syncer; Run runs it.
func New(opts Options) (*Syncer, error) {
	if opts.ZoneID == "" || opts.Installation == "" || opts.Client == nil || opts.Table == nil {
		return nil, errors.New("route53sync: ZoneID, Installation, Client and Table are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Syncer{opts: opts, log: opts.Logger.With("component", "route53", "zone", opts.ZoneID), warned: map[string]string{}}, nil
}

// InSync reports whether the last pass changed nothing or Route 53 said INSYNC of its change.
func (s *Syncer) InSync() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.insync
}

// Run syncs until ctx ends: whenever what herd keeps in the zone changes, every Resync, and
// again after a failed pass (backing off up to Resync).
func (s *Syncer) Run(ctx context.Context) error {
	tick := time.NewTicker(s.opts.Interval)
	defer tick.Stop()
	var last string
	var next time.Time
	backoff := s.opts.Interval
	for {
		if t, err := s.opts.Table(ctx); err != nil {
			s.log.Warn("route53: no routes", "err", err)
		} else if fp := fingerprint(t); fp != last || !time.Now().Before(next) {
			if err := s.Sync(ctx, t); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.log.Error("route53 sync failed", "err", err, "retry_in", backoff)
				last, next = "", time.Now().Add(backoff)
				backoff = min(2*backoff, s.opts.Resync)
			} else {
				last, next, backoff = fp, time.Now().Add(s.opts.Resync), s.opts.Interval
			}
		}
		s.follow(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// fingerprint is what of a table the zone's records depend on.
func fingerprint(t routes.Table) string {
	b, _ := json.Marshal(t.Routes)
	return string(b)
}

// follow asks Route 53 whether the last change is INSYNC.
func (s *Syncer) follow(ctx context.Context) {
	s.mu.Lock()
	id := s.pending
	s.mu.Unlock()
	if id == "" {
		return
	}
	out, err := s.opts.Client.GetChange(ctx, &route53.GetChangeInput{Id: aws.String(id)})
	if err != nil {
		s.log.Warn("route53: GetChange", "change", id, "err", err)
		return
	}
	if out.ChangeInfo.Status == types.ChangeStatusInsync {
		s.log.Info("route53 in sync", "change", id, "after", time.Since(aws.ToTime(out.ChangeInfo.SubmittedAt)).Round(time.Second))
		s.mu.Lock()
		if s.pending == id {
			s.pending, s.insync = "", true
		}
		s.mu.Unlock()
	}
}

// Sync puts the zone in step with t once: it lists the zone, works out the changes to the
// hostnames herd owns or may claim, and sends them in batches.
func (s *Syncer) Sync(ctx context.Context, t routes.Table) error {
	zone, existing, err := s.list(ctx)
	if err != nil {
		return err
	}
	byName := map[string][]types.ResourceRecordSet{}
	for _, rs := range existing {
		byName[aws.ToString(rs.Name)] = append(byName[aws.ToString(rs.Name)], rs)
	}
	var groups [][]types.Change
	kept := map[string]bool{}
	for _, r := range t.Routes {
		name := fqdn(r.Hostname)
		if !inZone(name, zone) {
			continue
		}
		kept[name] = true
		want, err := setsFor(r, s.opts.AWSRegions)
		if err != nil {
			s.warn(name, fmt.Sprintf("fleet %s: %v", r.Fleet, err))
			continue
		}
		if why := s.foreign(name, byName); why != "" {
			s.warn(name, fmt.Sprintf("fleet %s: %s is not herd's (%s): left as it is", r.Fleet, name, why))
			continue
		}
		if c := s.changes(name, r.Fleet, want, byName); len(c) > 0 {
			groups = append(groups, c)
		}
	}
	// Hostnames herd owns that no fleet routes any more: their records leave the zone.
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		owner, ok := strings.CutPrefix(name, ownerPrefix)
		sets := byName[name]
		if !ok || kept[owner] || !s.owns(sets) {
			continue
		}
		if c := s.changes(owner, "", nil, byName); len(c) > 0 {
			groups = append(groups, c)
		}
	}
	return s.send(ctx, groups)
}

// list reads every record set of the zone, and the zone's name (its SOA's).
func (s *Syncer) list(ctx context.Context) (string, []types.ResourceRecordSet, error) {
	var all []types.ResourceRecordSet
	zone := ""
	p := route53.NewListResourceRecordSetsPaginator(s.opts.Client, &route53.ListResourceRecordSetsInput{HostedZoneId: aws.String(s.opts.ZoneID)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return "", nil, fmt.Errorf("list the record sets of hosted zone %s: %w", s.opts.ZoneID, err)
		}
		for _, rs := range page.ResourceRecordSets {
			rs.Name = aws.String(fqdn(aws.ToString(rs.Name)))
			if rs.Type == types.RRTypeSoa {
				zone = aws.ToString(rs.Name)
			}
			all = append(all, rs)
		}
	}
	if zone == "" {
		return "", nil, fmt.Errorf("hosted zone %s lists no SOA record set", s.opts.ZoneID)
	}
	return zone, all, nil
}

// foreign says why a hostname is someone else's: its owner record names another installation,
// or it has records but no owner record of herd.
func (s *Syncer) foreign(name string, byName map[string][]types.ResourceRecordSet) string {
	if owners := byName[ownerPrefix+name]; len(owners) > 0 {
		if s.owns(owners) {
			return ""
		}
		return "its owner record " + ownerPrefix + name + " is another's"
	}
	for _, rs := range byName[name] {
		switch rs.Type {
		case types.RRTypeA, types.RRTypeAaaa, types.RRTypeCname:
			return fmt.Sprintf("it has %s records without herd's owner record %s", rs.Type, ownerPrefix+name)
		}
	}
	return ""
}

// owns reports whether one of sets is this installation's owner record.
func (s *Syncer) owns(sets []types.ResourceRecordSet) bool {
	for _, rs := range sets {
		if rs.Type == types.RRTypeTxt && ownerOf(rs) == s.opts.Installation {
			return true
		}
	}
	return false
}

// changes turn a hostname's A and AAAA sets and its owner record into want (none: the hostname
// leaves the zone): deletes first, as they are listed, then upserts, in one batch.
func (s *Syncer) changes(name, fleet string, want []types.ResourceRecordSet, byName map[string][]types.ResourceRecordSet) []types.Change {
	if len(want) > 0 {
		want = append(want, ownerSet(name, s.opts.Installation, fleet))
	}
	have := map[string]types.ResourceRecordSet{}
	for _, rs := range byName[name] {
		if rs.Type == types.RRTypeA || rs.Type == types.RRTypeAaaa {
			have[setKey(rs)] = rs
		}
	}
	for _, rs := range byName[ownerPrefix+name] {
		if rs.Type == types.RRTypeTxt {
			have[setKey(rs)] = rs
		}
	}
	wanted := map[string]bool{}
	var upserts []types.Change
	for _, rs := range want {
		wanted[setKey(rs)] = true
		if h, ok := have[setKey(rs)]; !ok || !sameSet(h, rs) {
			upserts = append(upserts, types.Change{Action: types.ChangeActionUpsert, ResourceRecordSet: &rs})
		}
	}
	var out []types.Change
	for _, k := range slices.Sorted(maps.Keys(have)) {
		if !wanted[k] {
			rs := have[k]
			out = append(out, types.Change{Action: types.ChangeActionDelete, ResourceRecordSet: &rs})
		}
	}
	return append(out, upserts...)
}

// send sends the groups of changes in batches of at most MaxBatch records, each group whole.
func (s *Syncer) send(ctx context.Context, groups [][]types.Change) error {
	var batch []types.Change
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		out, err := s.opts.Client.ChangeResourceRecordSets(ctx, &route53.ChangeResourceRecordSetsInput{
			HostedZoneId: aws.String(s.opts.ZoneID),
			ChangeBatch:  &types.ChangeBatch{Comment: aws.String("herd " + s.opts.Installation), Changes: batch},
		})
		if err != nil {
			return fmt.Errorf("change %d record sets of hosted zone %s: %w", len(batch), s.opts.ZoneID, err)
		}
		s.log.Info("route53 changed", "changes", len(batch), "change", aws.ToString(out.ChangeInfo.Id))
		s.mu.Lock()
		s.pending, s.insync = aws.ToString(out.ChangeInfo.Id), false
		s.mu.Unlock()
		batch, size = nil, 0
		return nil
	}
	for _, g := range groups {
		n := records(g)
		if size+n > s.opts.MaxBatch {
			if err := flush(); err != nil {
				return err
			}
		}
		batch, size = append(batch, g...), size+n
	}
	if err := flush(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.pending == "" {
		s.insync = true
	}
	s.mu.Unlock()
	return nil
}

// records counts a group's ResourceRecord elements as Route 53 does: an UPSERT's twice.
func records(changes []types.Change) int {
	n := 0
	for _, c := range changes {
		k := len(c.ResourceRecordSet.ResourceRecords)
		if c.Action == types.ChangeActionUpsert {
			k *= 2
		}
		n += k
	}
	return n
}

// warn logs a warning about a hostname once, until it changes.
func (s *Syncer) warn(name, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.warned[name] == msg {
		return
	}
	s.warned[name] = msg
	s.log.Warn("route53: " + msg)
}
