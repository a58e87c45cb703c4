package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// minInterval is every panel's minimum query interval: the exporter is meant
// to be scraped every few seconds during benchmarks, so $__rate_interval
// follows the scrape interval down to 5 s.
const minInterval = "5s"

// Panel widths on Grafana's 24-column grid and the default height.
const (
	full    = 24
	half    = 12
	third   = 8
	quarter = 6
	height  = 8
)

// Grafana units.
const (
	unitBits    = "bps"         // bits/s (SI)
	unitBytesPS = "Bps"         // bytes/s (SI)
	unitBytes   = "bytes"       // bytes (IEC)
	unitRatio   = "percentunit" // 0-1 shown as %
	unitPerSec  = "cps"         // events/s
	unitSeconds = "s"
	unitShort   = "short"
	unitDBm     = "dBm"
	unitCelsius = "celsius"
)

// row is a full-width, expanded row: the panels after it (up to the next
// row) belong to it, as Grafana stores expanded rows.
func row(title string) *dashboard.RowBuilder {
	return dashboard.NewRowBuilder(title)
}

// timeseriesPanel is a line chart of range queries.
func timeseriesPanel(title, description, unit string, width uint32, qs ...*promQuery) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Interval(minInterval).
		Targets(targets(qs)).
		Span(width).
		Height(height).
		Unit(unit).
		LineWidth(1).
		FillOpacity(10).
		ShowPoints(common.VisibilityModeNever).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true)).
		Tooltip(common.NewVizTooltipOptionsBuilder().
			Mode(common.TooltipDisplayModeMulti).
			Sort(common.SortOrderDescending))
}

// statsLegend is a table legend with mean, max and last: what a benchmark
// run reads off a throughput chart.
func statsLegend() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().
		DisplayMode(common.LegendDisplayModeTable).
		Placement(common.LegendPlacementBottom).
		ShowLegend(true).
		Calcs([]string{"mean", "max", "lastNotNull"})
}

// ratioPanel is a time series of 0-1 ratios shown as percent.
func ratioPanel(title, description string, width uint32, qs ...*promQuery) *timeseries.PanelBuilder {
	return timeseriesPanel(title, description, unitRatio, width, qs...).Min(0).Max(1)
}

// thresholdLine draws a red line at limit on a time series (green below);
// below=true makes values under limit red instead.
func thresholdLine(p *timeseries.PanelBuilder, limit float64, below bool) *timeseries.PanelBuilder {
	return p.Thresholds(thresholds(limit, below)).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
}

func thresholds(limit float64, below bool) *dashboard.ThresholdsConfigBuilder {
	base, over := "green", "red"
	if below {
		base, over = "red", "green"
	}
	return dashboard.NewThresholdsConfigBuilder().
		Mode(dashboard.ThresholdsModeAbsolute).
		Steps([]dashboard.Threshold{{Value: nil, Color: base}, {Value: &limit, Color: over}})
}

// statPanel shows the last value of each series.
func statPanel(title, description, unit string, width uint32, qs ...*promQuery) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Interval(minInterval).
		Targets(targets(qs)).
		Span(width).
		Height(height).
		Unit(unit).
		ColorMode(common.BigValueColorModeValue).
		GraphMode(common.BigValueGraphModeArea).
		TextMode(common.BigValueTextModeValueAndName).
		Orientation(common.VizOrientationAuto).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false))
}

// tablePanel shows instant queries as a table with the given columns first
// (in that order) and Time, __name__, job and hide hidden.
func tablePanel(title, description string, width uint32, columns, hide []string, qs ...*promQuery) *table.PanelBuilder {
	return table.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Interval(minInterval).
		Targets(targets(qs)).
		Span(width).
		Height(height).
		CellHeight(common.TableCellHeightSm).
		ShowHeader(true).
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"}).CountRows(false)).
		WithTransformation(organize(columns, hide))
}

// organize orders and hides table columns.
func organize(columns, hide []string) dashboard.DataTransformerConfig {
	exclude := map[string]bool{"Time": true, "__name__": true, "job": true}
	for _, h := range hide {
		exclude[h] = true
	}
	index := make(map[string]int, len(columns))
	for i, c := range columns {
		index[c] = i
	}
	return dashboard.DataTransformerConfig{
		Id: "organize",
		Options: map[string]any{
			"excludeByName": exclude,
			"indexByName":   index,
			"renameByName":  map[string]string{},
		},
	}
}

// stateTimelinePanel shows 0/1 states over time with the given mappings.
func stateTimelinePanel(title, description string, width uint32, mappings []dashboard.ValueMapping, qs ...*promQuery) *statetimeline.PanelBuilder {
	return statetimeline.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Interval(minInterval).
		Targets(targets(qs)).
		Span(width).
		Height(height).
		Mappings(mappings).
		MergeValues(true).
		ShowValue(common.VisibilityModeAuto).
		RowHeight(0.9).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(false).
			DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone))
}

// mapping is one value → text (and color) of a value mapping.
type mapping struct{ value, text, color string }

func valueMappings(ms ...mapping) []dashboard.ValueMapping {
	opts := make(map[string]dashboard.ValueMappingResult, len(ms))
	for i, m := range ms {
		opts[m.value] = dashboard.ValueMappingResult{Text: ptr(m.text), Color: ptr(m.color), Index: ptr(int32(i))}
	}
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: opts}}}
}

// upDown maps 1/0 to the given words, green/red.
func upDown(up, down string) []dashboard.ValueMapping {
	return valueMappings(mapping{"1", up, "green"}, mapping{"0", down, "red"})
}

// colorCells colors a table column by its value mappings.
func colorCells(mappings []dashboard.ValueMapping) []dashboard.DynamicConfigValue {
	return []dashboard.DynamicConfigValue{
		{Id: "mappings", Value: mappings},
		{Id: "custom.cellOptions", Value: map[string]any{"type": "color-background"}},
	}
}
