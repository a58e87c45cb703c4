package analyze

import (
	"math"
	"strings"
	"testing"
)

func near(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Abs(want)
}

func TestFitLinearExact(t *testing.T) {
	x := []float64{4.1e5, 6.2e5, 7.7e5, 8.5e5, 9.0e5}
	var y []float64
	for _, v := range x {
		y = append(y, 3.332e6*v+2.1e9)
	}
	f, err := FitLinear(x, y)
	if err != nil {
		t.Fatal(err)
	}
	if !near(f.Slope, 3.332e6, 1e-12) || !near(f.Intercept, 2.1e9, 1e-9) || !near(f.R2, 1, 1e-12) {
		t.Errorf("fit %+v, want slope 3.332e6, intercept 2.1e9, R² 1", f)
	}
	for i, r := range f.Residuals {
		if math.Abs(r) > 1e-6*y[i] {
			t.Errorf("residual %d = %g", i, r)
		}
	}
	if f.SlopeSE > 1e-6 {
		t.Errorf("slope SE %g on exact data", f.SlopeSE)
	}
}

func TestFitLinearNoise(t *testing.T) {
	// y = 2x + 1 with residuals +1, -1, -1, +1: slope 2 (the residuals are
	// orthogonal to x - mean(x) and sum to 0), SSE 4, Sxx 5, SE = sqrt(4/2/5).
	x := []float64{0, 1, 2, 3}
	y := []float64{2, 2, 4, 8}
	f, err := FitLinear(x, y)
	if err != nil {
		t.Fatal(err)
	}
	if !near(f.Slope, 2, 1e-12) || !near(f.Intercept, 1, 1e-12) {
		t.Errorf("slope %g intercept %g, want 2 and 1", f.Slope, f.Intercept)
	}
	if !near(f.SlopeSE, math.Sqrt(0.4), 1e-12) {
		t.Errorf("slope SE %g, want %g", f.SlopeSE, math.Sqrt(0.4))
	}
	// R² = 1 - SSE/SST, SST = sum((y-4)²) = 4+4+0+16 = 24.
	if !near(f.R2, 1-4.0/24, 1e-12) {
		t.Errorf("R² %g, want %g", f.R2, 1-4.0/24)
	}
}

func TestFitLinearErrors(t *testing.T) {
	for _, tc := range []struct {
		x, y []float64
		want string
	}{
		{[]float64{1}, []float64{1}, "at least 2"},
		{[]float64{2, 2, 2}, []float64{1, 2, 3}, "all x are equal"},
		{[]float64{1, 2}, []float64{1, math.NaN()}, "non-finite"},
	} {
		if _, err := FitLinear(tc.x, tc.y); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FitLinear(%v, %v) = %v, want %q", tc.x, tc.y, err, tc.want)
		}
	}
}

var sweepC = []float64{1, 2, 4, 8, 16, 32, 64}

func TestFitSaturationExact(t *testing.T) {
	for _, tc := range []struct{ a, b float64 }{{80.32, 1.2}, {2.5e3, 7}, {1, 40}, {0.03, 0.2}} {
		var y []float64
		for _, c := range sweepC {
			y = append(y, tc.a*c/(tc.b+c))
		}
		f, err := FitSaturation(sweepC, y)
		if err != nil {
			t.Fatal(err)
		}
		if !near(f.A, tc.a, 1e-6) || !near(f.B, tc.b, 1e-5) {
			t.Errorf("a=%g b=%g: fitted a=%.9g b=%.9g", tc.a, tc.b, f.A, f.B)
		}
		if f.ASE > 1e-5*tc.a || !near(f.R2, 1, 1e-9) {
			t.Errorf("a=%g b=%g: SE(a)=%g R²=%g on exact data", tc.a, tc.b, f.ASE, f.R2)
		}
		if want := tc.b > 64; f.Extrapolated != want {
			t.Errorf("a=%g b=%g: extrapolated %v", tc.a, tc.b, f.Extrapolated)
		}
	}
}

// TestFitSaturationCovariance checks the optimum and its standard errors
// on noisy data against an independent computation: the gradient of the
// sum of squares vanishes at the fit, and the covariance is s²·(JᵀJ)⁻¹
// with J from finite differences and the 2×2 inverse written out.
func TestFitSaturationCovariance(t *testing.T) {
	noise := []float64{0.6, -0.4, 0.3, -0.7, 0.5, -0.2, 0.4}
	var y []float64
	for i, c := range sweepC {
		y = append(y, 80.32*c/(1.2+c)+noise[i])
	}
	f, err := FitSaturation(sweepC, y)
	if err != nil {
		t.Fatal(err)
	}
	model := func(a, b, c float64) float64 { return a * c / (b + c) }
	var ga, gb, sse float64
	var j [][2]float64
	for i, c := range sweepC {
		r := y[i] - model(f.A, f.B, c)
		sse += r * r
		ha, hb := 1e-6*f.A, 1e-6*f.B
		da := (model(f.A+ha, f.B, c) - model(f.A-ha, f.B, c)) / (2 * ha)
		db := (model(f.A, f.B+hb, c) - model(f.A, f.B-hb, c)) / (2 * hb)
		ga += -2 * r * da
		gb += -2 * r * db
		j = append(j, [2]float64{da, db})
	}
	if math.Abs(ga) > 1e-6 || math.Abs(gb) > 1e-5 {
		t.Errorf("gradient at the fit (%g, %g), want 0", ga, gb)
	}
	var m00, m01, m11 float64
	for _, r := range j {
		m00 += r[0] * r[0]
		m01 += r[0] * r[1]
		m11 += r[1] * r[1]
	}
	det := m00*m11 - m01*m01
	s2 := sse / float64(len(sweepC)-2)
	seA, seB := math.Sqrt(s2*m11/det), math.Sqrt(s2*m00/det)
	if !near(f.ASE, seA, 1e-4) || !near(f.BSE, seB, 1e-4) {
		t.Errorf("SE(a)=%g SE(b)=%g, want %g %g", f.ASE, f.BSE, seA, seB)
	}
	// 95 % CI half-width: t(0.975, 5 dof) = 2.5706.
	if !near(f.ACI95, 2.5706*seA, 1e-3) {
		t.Errorf("CI95(a) = %g, want %g", f.ACI95, 2.5706*seA)
	}
	if math.Abs(f.A-80.32) > 3*f.ASE {
		t.Errorf("a = %g ± %g is more than 3 SE from 80.32", f.A, f.ASE)
	}
	var sum float64
	for i := range y {
		if !near(f.Fitted[i]+f.Residuals[i], y[i], 1e-12) {
			t.Errorf("fitted + residual != y at %d", i)
		}
		sum += f.Residuals[i] * f.Residuals[i]
	}
	if !near(f.RMSE, math.Sqrt(sum/7), 1e-12) {
		t.Errorf("RMSE %g", f.RMSE)
	}
}

func TestFitSaturationErrors(t *testing.T) {
	for _, tc := range []struct {
		c, y []float64
		want string
	}{
		{[]float64{1, 2}, []float64{1, 2}, "at least 3 concurrency levels"},
		{[]float64{1, 1, 2, 2}, []float64{1, 1, 2, 2}, "at least 3 concurrency levels"},
		{[]float64{0, 1, 2}, []float64{1, 2, 3}, "must be positive"},
		{[]float64{1, 2, 4}, []float64{1, 0, 3}, "must be positive"},
		{[]float64{1, 2, 4}, []float64{1, 2}, "differ in length"},
	} {
		if _, err := FitSaturation(tc.c, tc.y); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FitSaturation(%v, %v) = %v, want %q", tc.c, tc.y, err, tc.want)
		}
	}
}

func TestFitSaturationLinearData(t *testing.T) {
	// A straight line has no ceiling within the sweep: b ends beyond the
	// largest C and the fit says so.
	var y []float64
	for _, c := range sweepC {
		y = append(y, 0.5*c)
	}
	f, err := FitSaturation(sweepC, y)
	if err == nil && !f.Extrapolated {
		t.Errorf("linear data: fit %+v not marked extrapolated", f)
	}
}

func TestFindKnee(t *testing.T) {
	c := []int{1, 2, 4, 8, 16, 32, 64}
	curve := func(b float64) []float64 {
		var y []float64
		for _, x := range c {
			y = append(y, float64(x)/(b+float64(x)))
		}
		return y
	}
	// y = C/(b+C): the gain from C to 2C is b/(b+2C); with b = 1.2 it is
	// 6.98 % from 8 and 3.61 % from 16.
	y := curve(1.2)
	k, err := FindKnee(c, y, y, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	if k.C != 16 {
		t.Errorf("knee %d, want 16; steps %+v", k.C, k.Steps)
	}
	if g := k.Steps[3].TPSGain; !near(g, 1.2/17.2, 1e-12) {
		t.Errorf("gain 8→16 = %g, want %g", g, 1.2/17.2)
	}
	// Both gains must fall below: a rail still growing moves the knee.
	rail := append([]float64(nil), y...)
	rail[5] = rail[4] * 1.06
	rail[6] = rail[5] * 1.01
	if k, _ := FindKnee(c, y, rail, 0.05); k.C != 32 {
		t.Errorf("rail growing 6 %% from 16 to 32: knee %d, want 32", k.C)
	}
	// A threshold of exactly the gain is not "below".
	if k, _ := FindKnee([]int{1, 2, 4}, []float64{1, 1.5, 1.5}, []float64{1, 1.5, 1.5}, 0.5); k.C != 2 {
		t.Errorf("gain == threshold: knee %d, want 2", k.C)
	}
	// No knee within the sweep.
	if k, _ := FindKnee(c, curve(1000), curve(1000), 0.05); k.C != 0 {
		t.Errorf("linear growth: knee %d, want none", k.C)
	}
	if _, err := FindKnee([]int{4, 2}, []float64{1, 2}, []float64{1, 2}, 0.05); err == nil {
		t.Error("unsorted points accepted")
	}
}
