package awstwin

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// Credentials are static credentials the twin accepts.
func (tw *Twin) Credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(tw.opts.AccessKeyID, tw.opts.SecretAccessKey, "")
}

// Client is an EC2 client of the SDK for region that reaches the twin, signing with its
// credentials, for tests that call EC2 themselves.
func (tw *Twin) Client(region string, optFns ...func(*ec2.Options)) *ec2.Client {
	return ec2.New(ec2.Options{
		Region:       region,
		BaseEndpoint: aws.String(tw.URL),
		Credentials:  tw.Credentials(),
	}, optFns...)
}
