// Package awsbody keeps the AWS SDK's requests from losing their connection to a race between
// smithy-go and net/http over the request body.
//
// smithy-go closes a request's body as soon as the HTTP client returns the response, and its
// closed body answers WriteTo with io.EOF as an error. net/http, after writing a body of known
// length, reads it once more to check that nothing is left, and may do so after the response
// came back (the server answers once it has the body). That read goes through WriteTo, fails,
// and net/http closes the connection, often while the SDK is still reading the response: the
// SDK then retries a call that had succeeded, spending a request of the account's budget.
// Read answers io.EOF too once the body is closed, which is the normal end of a body, so a
// body that offers Read alone is checked without error.
package awsbody

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Wrap returns c with every request's body offered to net/http as a plain io.ReadCloser.
// Set it as a client's HTTPClient in the options function given to NewFromConfig, which runs
// after the SDK has set up its own client (timeouts, defaults mode) to wrap.
func Wrap(c aws.HTTPClient) aws.HTTPClient { return client{c} }

type client struct{ next aws.HTTPClient }

func (c client) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = readCloser{req.Body}
	}
	return c.next.Do(req)
}

// readCloser hides every method of the body but Read and Close.
type readCloser struct{ io.ReadCloser }
