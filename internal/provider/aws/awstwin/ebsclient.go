package awstwin

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ebs"
)

// EBSClient is a client of the EBS direct APIs for region that reaches the twin, signing with
// its credentials, for tests that call them themselves.
func (tw *Twin) EBSClient(region string, optFns ...func(*ebs.Options)) *ebs.Client {
	return ebs.New(ebs.Options{
		Region:       region,
		BaseEndpoint: aws.String(tw.URL),
		Credentials:  tw.Credentials(),
	}, optFns...)
}
