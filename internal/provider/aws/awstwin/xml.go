package awstwin

import (
	"encoding/xml"
	"maps"
	"slices"
	"time"
)

// namespace is the XML namespace of EC2's answers for the API version the twin speaks.
const namespace = "http://ec2.amazonaws.com/doc/" + apiVersion + "/"

// The types below are EC2's answers as its Query API writes them: lower camel case elements,
// lists as <xxxSet><item>...</item></xxxSet>, times in ISO 8601.

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlGroup struct {
	GroupID string `xml:"groupId"`
}

type xmlStateReason struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type xmlProfile struct {
	Arn string `xml:"arn"`
	ID  string `xml:"id"`
}

type xmlInstance struct {
	InstanceID       string          `xml:"instanceId"`
	ImageID          string          `xml:"imageId"`
	State            xmlState        `xml:"instanceState"`
	PrivateDNSName   string          `xml:"privateDnsName"`
	Reason           string          `xml:"reason"`
	AmiLaunchIndex   int             `xml:"amiLaunchIndex"`
	InstanceType     string          `xml:"instanceType"`
	LaunchTime       string          `xml:"launchTime"`
	AvailabilityZone string          `xml:"placement>availabilityZone"`
	SubnetID         string          `xml:"subnetId,omitempty"`
	VpcID            string          `xml:"vpcId,omitempty"`
	PrivateIPAddress string          `xml:"privateIpAddress,omitempty"`
	Groups           []xmlGroup      `xml:"groupSet>item"`
	StateReason      *xmlStateReason `xml:"stateReason,omitempty"`
	Architecture     string          `xml:"architecture"`
	RootDeviceType   string          `xml:"rootDeviceType"`
	ClientToken      string          `xml:"clientToken,omitempty"`
	Lifecycle        string          `xml:"instanceLifecycle,omitempty"`
	Tags             []xmlTag        `xml:"tagSet>item,omitempty"`
	Profile          *xmlProfile     `xml:"iamInstanceProfile,omitempty"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Groups        []xmlGroup    `xml:"groupSet>item"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type runInstancesResponse struct {
	XMLName   xml.Name `xml:"RunInstancesResponse"`
	Namespace string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	xmlReservation
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Namespace    string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []xmlReservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type xmlStateChange struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  xmlState `xml:"currentState"`
	PreviousState xmlState `xml:"previousState"`
}

type terminateInstancesResponse struct {
	XMLName   xml.Name         `xml:"TerminateInstancesResponse"`
	Namespace string           `xml:"xmlns,attr"`
	RequestID string           `xml:"requestId"`
	Changes   []xmlStateChange `xml:"instancesSet>item"`
}

type createTagsResponse struct {
	XMLName   xml.Name `xml:"CreateTagsResponse"`
	Namespace string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
}

type xmlImage struct {
	ImageID      string   `xml:"imageId"`
	ImageState   string   `xml:"imageState"`
	OwnerID      string   `xml:"imageOwnerId"`
	Name         string   `xml:"name"`
	CreationDate string   `xml:"creationDate"`
	Architecture string   `xml:"architecture"`
	Tags         []xmlTag `xml:"tagSet>item,omitempty"`
	xmlRegistration
}

type describeImagesResponse struct {
	XMLName   xml.Name   `xml:"DescribeImagesResponse"`
	Namespace string     `xml:"xmlns,attr"`
	RequestID string     `xml:"requestId"`
	Images    []xmlImage `xml:"imagesSet>item"`
}

// errorResponse is EC2's error document, the same for every action.
type errorResponse struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

// stateCodes are EC2's instance state codes (the low byte of instanceState.code).
var stateCodes = map[string]int{
	StatePending: 0, StateRunning: 16, StateShuttingDown: 32, StateTerminated: 48, StateStopping: 64, StateStopped: 80,
}

func xmlTags(tags map[string]string) []xmlTag {
	var out []xmlTag
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, xmlTag{Key: k, Value: tags[k]})
	}
	return out
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func (in *instance) xml() xmlInstance {
	x := xmlInstance{
		InstanceID:       in.ID,
		ImageID:          in.ImageID,
		State:            xmlState{Code: stateCodes[in.State], Name: in.State},
		PrivateDNSName:   in.PrivateDNSName(),
		Reason:           in.TransitionReason,
		InstanceType:     in.InstanceType,
		LaunchTime:       isoTime(in.LaunchTime),
		AvailabilityZone: in.AvailabilityZone,
		SubnetID:         in.SubnetID,
		VpcID:            in.VpcID,
		PrivateIPAddress: in.PrivateIP,
		Architecture:     "x86_64",
		RootDeviceType:   "ebs",
		ClientToken:      in.ClientToken,
		Lifecycle:        in.Lifecycle,
		Tags:             xmlTags(in.Tags),
	}
	for _, g := range in.SecurityGroups {
		x.Groups = append(x.Groups, xmlGroup{GroupID: g})
	}
	if in.StateReasonCode != "" {
		x.StateReason = &xmlStateReason{Code: in.StateReasonCode, Message: in.StateReasonMessage}
	}
	if in.InstanceProfile != "" {
		x.Profile = &xmlProfile{Arn: in.InstanceProfile, ID: "AIPA" + in.ID[2:]}
	}
	return x
}
