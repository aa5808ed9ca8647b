package awstwin

import (
	"net/http"
	"net/url"
)

// Spot instances: RunInstances with InstanceMarketOptions.MarketType spot launches an instance
// whose lifecycle is "spot" (instanceLifecycle in DescribeInstances); NoSpotCapacity refuses spot
// launches as EC2 does when the spot pool is empty, while on-demand ones still launch; a spot
// instance's interruption notice is posted in its metadata (InterruptSpot, imds.go).

// NoSpotCapacity makes RunInstances of spot instances fail with InsufficientInstanceCapacity
// (none true) or launch again (none false).
func (tw *Twin) NoSpotCapacity(none bool) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.faults.noSpot = none
}

// lifecycle is the lifecycle of the instances a RunInstances asks for: "spot", or "" for
// on-demand, as DescribeInstances writes it.
func lifecycle(f url.Values) string {
	if f.Get("InstanceMarketOptions.MarketType") == "spot" {
		return "spot"
	}
	return ""
}

// spotFault is the refusal of a spot launch while NoSpotCapacity holds; the caller holds tw.mu.
func (tw *Twin) spotFault(f url.Values) *apiError {
	if lifecycle(f) == "spot" && tw.faults.noSpot {
		return errorf(http.StatusInternalServerError, "InsufficientInstanceCapacity",
			"There is no Spot capacity available that matches your request.")
	}
	return nil
}
