package main

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestSumBy(t *testing.T) {
	page := `# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="pods",subresource="",verb="LIST"} 3
apiserver_request_total{code="500",resource="pods",subresource="",verb="LIST"} 1
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 2
apiserver_request_total{code="200",resource="pods",subresource="status",verb="PATCH"} 5
# TYPE kubelet_pleg_relist_duration_seconds histogram
kubelet_pleg_relist_duration_seconds_bucket{le="+Inf"} 7
kubelet_pleg_relist_duration_seconds_sum 0.1
kubelet_pleg_relist_duration_seconds_count 7
`
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	got := sumBy(fams["apiserver_request_total"], []string{"verb", "resource", "subresource"})
	if got["LIST pods"] != 4 || got["PUT leases"] != 2 || got["PATCH pods status"] != 5 || len(got) != 3 {
		t.Errorf("requests by verb and resource: %v", got)
	}
	if got := sumBy(fams["kubelet_pleg_relist_duration_seconds"], nil); got[""] != 7 {
		t.Errorf("relists: %v", got)
	}
}
