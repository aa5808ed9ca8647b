package awstwin

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// list reads a Query API list: prefix.1, prefix.2, ... up to the first missing member.
func list(f url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		k := fmt.Sprintf("%s.%d", prefix, i)
		if !f.Has(k) {
			return out
		}
		out = append(out, f.Get(k))
	}
}

// tagsOf reads a list of tags: prefix.N.Key and prefix.N.Value.
func tagsOf(f url.Values, prefix string) map[string]string {
	tags := map[string]string{}
	for i := 1; ; i++ {
		k := fmt.Sprintf("%s.%d.", prefix, i)
		if !f.Has(k + "Key") {
			return tags
		}
		tags[f.Get(k+"Key")] = f.Get(k + "Value")
	}
}

// resourceTags reads the tags of RunInstances' TagSpecification for resourceType.
func resourceTags(f url.Values, resourceType string) map[string]string {
	tags := map[string]string{}
	for i := 1; ; i++ {
		k := fmt.Sprintf("TagSpecification.%d.", i)
		if !f.Has(k + "ResourceType") {
			return tags
		}
		if f.Get(k+"ResourceType") == resourceType {
			for key, v := range tagsOf(f, k+"Tag") {
				tags[key] = v
			}
		}
	}
}

// filter is one of a Describe call's filters: a resource passes when one of the values matches.
type filter struct {
	name   string
	values []string
}

// filterSet is a Describe call's filters: a resource passes when it passes every one.
type filterSet []filter

// fields are what filters look at: a resource's tags and its named attributes.
type fields struct {
	tags   map[string]string
	values map[string]string
}

var (
	instanceFilters = []string{"instance-id", "instance-state-name", "instance-type", "client-token", "subnet-id", "availability-zone", "reservation-id", "tag-key"}
	imageFilters    = []string{"image-id", "name", "state", "tag-key"}
)

// parseFilters reads Filter.N.Name and Filter.N.Value.M, refusing a filter EC2 would not know.
func parseFilters(f url.Values, known []string) (filterSet, *apiError) {
	var out filterSet
	for i := 1; ; i++ {
		k := fmt.Sprintf("Filter.%d.", i)
		if !f.Has(k + "Name") {
			return out, nil
		}
		name := f.Get(k + "Name")
		if !strings.HasPrefix(name, "tag:") && !slices.Contains(known, name) {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "The filter '%s' is invalid", name)
		}
		out = append(out, filter{name: name, values: list(f, k+"Value")})
	}
}

func (fs filterSet) match(x fields) bool {
	for _, f := range fs {
		if !f.match(x) {
			return false
		}
	}
	return true
}

func (f filter) match(x fields) bool {
	for _, want := range f.values {
		switch {
		case f.name == "tag-key":
			if _, ok := x.tags[want]; ok {
				return true
			}
		case strings.HasPrefix(f.name, "tag:"):
			if v, ok := x.tags[strings.TrimPrefix(f.name, "tag:")]; ok && wildcard(want, v) {
				return true
			}
		default:
			if v, ok := x.values[f.name]; ok && wildcard(want, v) {
				return true
			}
		}
	}
	return false
}

// wildcard matches EC2's filter values: * matches any run of characters, ? any one.
func wildcard(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if wildcard(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && wildcard(pattern[1:], s[1:])
	}
	return s != "" && s[0] == pattern[0] && wildcard(pattern[1:], s[1:])
}

func instanceFields(in *instance) fields {
	return fields{tags: in.Tags, values: map[string]string{
		"instance-id": in.ID, "instance-state-name": in.State, "instance-type": in.InstanceType,
		"client-token": in.ClientToken, "subnet-id": in.SubnetID, "availability-zone": in.AvailabilityZone,
		"reservation-id": in.ReservationID,
	}}
}
