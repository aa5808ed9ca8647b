package awstwin

import (
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Every action below runs with tw.mu held.

func (tw *Twin) runInstances(req request) (any, *apiError) {
	f := req.form
	imageID, instanceType := f.Get("ImageId"), f.Get("InstanceType")
	if imageID == "" {
		return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter ImageId")
	}
	count, err := strconv.Atoi(f.Get("MaxCount"))
	if minCount, err2 := strconv.Atoi(f.Get("MinCount")); err != nil || err2 != nil || minCount < 1 || count < minCount {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "MinCount and MaxCount must be positive and MinCount <= MaxCount")
	}
	if instanceType == "" {
		instanceType = "m1.small" // EC2's default
	}
	token := f.Get("ClientToken")
	if len(token) > 64 {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "ClientToken is longer than 64 characters")
	}
	params := launchParams(f)
	if l, ok := tw.tokens[req.region+"/"+token]; token != "" && ok {
		if l.params != params {
			return nil, errorf(http.StatusBadRequest, "IdempotentParameterMismatch",
				"The client token you have provided is associated with a resource that is already deleted or was created with different parameters. Please use a different client token.")
		}
		return tw.reservationAnswer(l.reservation), nil
	}
	if img, ok := tw.images[imageID]; !ok || img.Region != req.region {
		return nil, errorf(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", imageID)
	}
	subnet := f.Get("SubnetId")
	if subnet != "" && !strings.HasPrefix(subnet, "subnet-") {
		return nil, errorf(http.StatusBadRequest, "InvalidSubnetID.Malformed", "The subnet ID '%s' is malformed", subnet)
	}
	zone := availabilityZone(req.region, subnet)
	if tw.faults.unsupported[instanceType] {
		return nil, errorf(http.StatusBadRequest, "Unsupported",
			"Your requested instance type (%s) is not supported in your requested Availability Zone (%s).", instanceType, zone)
	}
	if err := tw.spotFault(f); err != nil {
		return nil, err
	}
	for _, c := range tw.faults.noCapacity {
		if (c.instanceType == "" || c.instanceType == instanceType) && (c.subnetID == "" || c.subnetID == subnet) {
			return nil, errorf(http.StatusInternalServerError, "InsufficientInstanceCapacity",
				"We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity.", instanceType, zone)
		}
	}
	for k := range resourceTags(f, "instance") {
		if strings.HasPrefix(strings.ToLower(k), "aws:") {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use")
		}
	}
	profile := f.Get("IamInstanceProfile.Arn")
	if name := f.Get("IamInstanceProfile.Name"); name != "" {
		profile = fmt.Sprintf("arn:aws:iam::%s:instance-profile/%s", OwnerID, name)
	}
	tw.seq++
	reservation := fmt.Sprintf("r-%017x", tw.seq)
	now := tw.opts.Now()
	var first string
	for i := 0; i < count; i++ {
		tw.seq++
		in := &instance{
			ID: fmt.Sprintf("i-%017x", tw.seq), ReservationID: reservation, Region: req.region,
			ImageID: imageID, InstanceType: instanceType,
			SubnetID: subnet, VpcID: "vpc-0" + req.region, AvailabilityZone: zone,
			PrivateIP:      fmt.Sprintf("10.%d.%d.%d", (tw.seq>>16)&0xff, (tw.seq>>8)&0xff, tw.seq&0xff),
			SecurityGroups: list(f, "SecurityGroupId"), InstanceProfile: profile,
			ClientToken: token, UserData: f.Get("UserData"), Lifecycle: lifecycle(f),
			Tags:       resourceTags(f, "instance"),
			LaunchTime: now, State: StatePending, StateChanged: now,
			StateReasonCode: "pending", StateReasonMessage: "pending",
		}
		if err := tw.launchOnBackend(in); err != nil {
			return nil, err
		}
		tw.instances[in.ID] = in
		tw.order = append(tw.order, in.ID)
		tw.serveMetadata(in.ID)
		if first == "" {
			first = in.ID
		}
	}
	if token != "" {
		tw.tokens[req.region+"/"+token] = &launch{params: params, reservation: reservation, instanceID: first}
	}
	return tw.reservationAnswer(reservation), nil
}

// reservationAnswer is RunInstances' answer for a reservation, as it is now.
func (tw *Twin) reservationAnswer(reservation string) *runInstancesResponse {
	now := tw.opts.Now()
	out := &runInstancesResponse{xmlReservation: xmlReservation{ReservationID: reservation, OwnerID: OwnerID}}
	for _, id := range tw.order {
		if in := tw.instances[id]; in.ReservationID == reservation {
			tw.advance(in, now)
			out.Instances = append(out.Instances, in.xml())
		}
	}
	return out
}

// launchParams is what a ClientToken must be used with again: every parameter but the token.
func launchParams(f url.Values) string {
	c := url.Values{}
	for k, v := range f {
		if k != "ClientToken" {
			c[k] = v
		}
	}
	return c.Encode()
}

// availabilityZone places a subnet in one of the region's zones, always the same one.
func availabilityZone(region, subnet string) string {
	if subnet == "" {
		return region + "a"
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(subnet))
	return region + string(rune('a'+h.Sum32()%3))
}

func (tw *Twin) describeInstances(req request) (any, *apiError) {
	f := req.form
	ids := list(f, "InstanceId")
	maxResults := 1000
	if s := f.Get("MaxResults"); s != "" {
		if len(ids) > 0 {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 5 || n > 1000 {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Value ( %s ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", s)
		}
		maxResults = n
	}
	if _, err := tw.lookup(req.region, ids); err != nil {
		return nil, err
	}
	filters, aerr := parseFilters(f, instanceFilters)
	if aerr != nil {
		return nil, aerr
	}
	now := tw.opts.Now()
	var reservations []xmlReservation
	for _, id := range tw.order {
		in := tw.instances[id]
		if in.Region != req.region || !tw.visible(in, now) || len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		tw.advance(in, now)
		if !filters.match(instanceFields(in)) {
			continue
		}
		if n := len(reservations); n > 0 && reservations[n-1].ReservationID == in.ReservationID {
			reservations[n-1].Instances = append(reservations[n-1].Instances, in.xml())
			continue
		}
		reservations = append(reservations, xmlReservation{ReservationID: in.ReservationID, OwnerID: OwnerID, Instances: []xmlInstance{in.xml()}})
	}
	start := 0
	if tok := f.Get("NextToken"); tok != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(tok, "twin-"))
		if err != nil || !strings.HasPrefix(tok, "twin-") || n < 0 || n > len(reservations) {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Invalid value '%s' for nextToken", tok)
		}
		start = n
	}
	out := &describeInstancesResponse{}
	end := min(start+maxResults, len(reservations))
	out.Reservations = reservations[start:end]
	if end < len(reservations) {
		out.NextToken = "twin-" + strconv.Itoa(end)
	}
	return out, nil
}

// lookup finds instances by ID in region, failing as EC2 does for any it cannot see.
func (tw *Twin) lookup(region string, ids []string) ([]*instance, *apiError) {
	now := tw.opts.Now()
	var found []*instance
	var missing []string
	for _, id := range ids {
		in, ok := tw.instances[id]
		if !ok || in.Region != region || !tw.visible(in, now) {
			missing = append(missing, id)
			continue
		}
		tw.advance(in, now)
		found = append(found, in)
	}
	switch {
	case len(missing) == 1:
		return nil, errorf(http.StatusBadRequest, "InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", missing[0])
	case len(missing) > 1:
		return nil, errorf(http.StatusBadRequest, "InvalidInstanceID.NotFound", "The instance IDs '%s' do not exist", strings.Join(missing, ", "))
	}
	return found, nil
}

func (tw *Twin) terminateInstances(req request) (any, *apiError) {
	ids := list(req.form, "InstanceId")
	if len(ids) == 0 {
		return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter InstanceId")
	}
	found, err := tw.lookup(req.region, ids)
	if err != nil {
		return nil, err
	}
	out := &terminateInstancesResponse{}
	for _, in := range found {
		prev := in.State
		if prev != StateShuttingDown && prev != StateTerminated {
			tw.setState(in, StateShuttingDown, "Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown")
			tw.advance(in, tw.opts.Now())
		}
		out.Changes = append(out.Changes, xmlStateChange{InstanceID: in.ID,
			CurrentState: xmlState{Code: stateCodes[in.State], Name: in.State}, PreviousState: xmlState{Code: stateCodes[prev], Name: prev}})
	}
	return out, nil
}

func (tw *Twin) createTags(req request) (any, *apiError) {
	ids := list(req.form, "ResourceId")
	tags := tagsOf(req.form, "Tag")
	if len(ids) == 0 || len(tags) == 0 {
		return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameters ResourceId and Tag")
	}
	for k := range tags {
		if strings.HasPrefix(strings.ToLower(k), "aws:") {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use")
		}
	}
	var targets []map[string]string
	for _, id := range ids {
		switch {
		case strings.HasPrefix(id, "i-"):
			found, err := tw.lookup(req.region, []string{id})
			if err != nil {
				return nil, err
			}
			targets = append(targets, found[0].Tags)
		case strings.HasPrefix(id, "ami-") && tw.images[id] != nil && tw.images[id].Region == req.region:
			targets = append(targets, tw.images[id].Tags)
		default:
			return nil, errorf(http.StatusBadRequest, "InvalidID", "The ID '%s' is not valid", id)
		}
	}
	for _, t := range targets {
		maps.Copy(t, tags)
	}
	return &createTagsResponse{Return: true}, nil
}

func (tw *Twin) describeImages(req request) (any, *apiError) {
	ids := list(req.form, "ImageId")
	for _, o := range list(req.form, "Owner") {
		if o != "self" && o != OwnerID {
			return &describeImagesResponse{}, nil // the twin's account owns every image it has
		}
	}
	filters, aerr := parseFilters(req.form, imageFilters)
	if aerr != nil {
		return nil, aerr
	}
	out := &describeImagesResponse{}
	for _, id := range slices.Sorted(maps.Keys(tw.images)) {
		img := tw.images[id]
		if img.Region != req.region || len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		if !filters.match(fields{tags: img.Tags, values: map[string]string{"image-id": id, "name": img.Name, "state": img.state()}}) {
			continue
		}
		out.Images = append(out.Images, img.xml())
	}
	return out, nil
}
