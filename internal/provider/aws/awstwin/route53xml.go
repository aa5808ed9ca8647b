package awstwin

import "encoding/xml"

// route53Namespace is the XML namespace of Route 53's requests and answers (API 2013-04-01).
const route53Namespace = "https://route53.amazonaws.com/doc/2013-04-01/"

// The types below are Route 53's REST-XML documents: upper camel case elements, lists as
// <Things><Thing>...</Thing></Things>.

// RecordSet is a resource record set as Route 53 writes it, and the twin's record of one.
type RecordSet struct {
	Name             string       `xml:"Name"`
	Type             string       `xml:"Type"`
	SetIdentifier    string       `xml:"SetIdentifier,omitempty"`
	Weight           *int64       `xml:"Weight,omitempty"`
	Region           string       `xml:"Region,omitempty"`
	Failover         string       `xml:"Failover,omitempty"`
	MultiValueAnswer *bool        `xml:"MultiValueAnswer,omitempty"`
	TTL              *int64       `xml:"TTL,omitempty"`
	Records          []Record     `xml:"ResourceRecords>ResourceRecord"`
	AliasTarget      *AliasTarget `xml:"AliasTarget,omitempty"`
	HealthCheckID    string       `xml:"HealthCheckId,omitempty"`
}

// Record is one value of a record set.
type Record struct {
	Value string `xml:"Value"`
}

// AliasTarget points an alias record set at another name.
type AliasTarget struct {
	HostedZoneID         string `xml:"HostedZoneId"`
	DNSName              string `xml:"DNSName"`
	EvaluateTargetHealth bool   `xml:"EvaluateTargetHealth"`
}

type xmlChange struct {
	Action            string    `xml:"Action"`
	ResourceRecordSet RecordSet `xml:"ResourceRecordSet"`
}

type changeResourceRecordSetsRequest struct {
	XMLName xml.Name    `xml:"ChangeResourceRecordSetsRequest"`
	Comment string      `xml:"ChangeBatch>Comment"`
	Changes []xmlChange `xml:"ChangeBatch>Changes>Change"`
}

type xmlChangeInfo struct {
	ID          string `xml:"Id"`
	Status      string `xml:"Status"`
	SubmittedAt string `xml:"SubmittedAt"`
	Comment     string `xml:"Comment,omitempty"`
}

type changeResourceRecordSetsResponse struct {
	XMLName    xml.Name      `xml:"ChangeResourceRecordSetsResponse"`
	Namespace  string        `xml:"xmlns,attr"`
	ChangeInfo xmlChangeInfo `xml:"ChangeInfo"`
}

type getChangeResponse struct {
	XMLName    xml.Name      `xml:"GetChangeResponse"`
	Namespace  string        `xml:"xmlns,attr"`
	ChangeInfo xmlChangeInfo `xml:"ChangeInfo"`
}

type listResourceRecordSetsResponse struct {
	XMLName              xml.Name    `xml:"ListResourceRecordSetsResponse"`
	Namespace            string      `xml:"xmlns,attr"`
	ResourceRecordSets   []RecordSet `xml:"ResourceRecordSets>ResourceRecordSet"`
	IsTruncated          bool        `xml:"IsTruncated"`
	NextRecordName       string      `xml:"NextRecordName,omitempty"`
	NextRecordType       string      `xml:"NextRecordType,omitempty"`
	NextRecordIdentifier string      `xml:"NextRecordIdentifier,omitempty"`
	MaxItems             int         `xml:"MaxItems"`
}

// route53Error is Route 53's error document.
type route53Error struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Namespace string   `xml:"xmlns,attr"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}
