package analyze

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// LinearFit is y = Slope·x + Intercept fitted by ordinary least squares.
type LinearFit struct {
	Slope, Intercept float64
	// SlopeSE is the standard error of the slope (NaN with fewer than 3 points).
	SlopeSE float64
	// R2 is the coefficient of determination (NaN when y is constant).
	R2        float64
	N         int
	Fitted    []float64
	Residuals []float64
}

// FitLinear fits y = slope·x + intercept by least squares (gonum/stat).
func FitLinear(x, y []float64) (LinearFit, error) {
	if len(x) != len(y) {
		return LinearFit{}, errors.New("x and y differ in length")
	}
	if len(x) < 2 {
		return LinearFit{}, fmt.Errorf("a line needs at least 2 points, have %d", len(x))
	}
	if err := finite(x, y); err != nil {
		return LinearFit{}, err
	}
	if floats.Max(x) == floats.Min(x) {
		return LinearFit{}, errors.New("all x are equal: the slope is undetermined")
	}
	alpha, beta := stat.LinearRegression(x, y, nil, false)
	f := LinearFit{Slope: beta, Intercept: alpha, N: len(x), SlopeSE: math.NaN(), R2: math.NaN()}
	var sse float64
	for i := range x {
		fit := alpha + beta*x[i]
		f.Fitted = append(f.Fitted, fit)
		f.Residuals = append(f.Residuals, y[i]-fit)
		sse += (y[i] - fit) * (y[i] - fit)
	}
	if stat.Variance(y, nil) > 0 {
		f.R2 = stat.RSquared(x, y, nil, alpha, beta)
	}
	if len(x) > 2 {
		mx := stat.Mean(x, nil)
		var sxx float64
		for _, v := range x {
			sxx += (v - mx) * (v - mx)
		}
		f.SlopeSE = math.Sqrt(sse / float64(len(x)-2) / sxx)
	}
	return f, nil
}

// SaturationFit is the model y = A·C/(B+C) fitted by nonlinear least
// squares: A is the asymptote (the throughput as C → ∞), B the
// concurrency at which half of it is reached.
type SaturationFit struct {
	A, B float64
	// ASE and BSE are standard errors from the covariance s²·(JᵀJ)⁻¹ at the
	// optimum (s² = SSE/(n−2)); ACI95 and BCI95 the half-widths of the 95 %
	// confidence intervals (Student's t, n−2 degrees of freedom). NaN with
	// fewer than 3 points.
	ASE, BSE, ACI95, BCI95 float64
	RMSE, R2               float64
	N                      int
	Fitted, Residuals      []float64
	// Extrapolated is set when B exceeds the largest C of the sweep: the
	// curve has not bent yet and A lies beyond the data.
	Extrapolated bool
}

// Eval is the fitted curve at c.
func (f SaturationFit) Eval(c float64) float64 { return f.A * c / (f.B + c) }

// FitSaturation fits y = a·C/(b+C) with a, b > 0. The start point comes
// from the Hanes–Woolf linearization (C/y = C/a + b/a, a straight line in
// C); gonum's BFGS then minimizes the sum of squared residuals over
// (ln a, ln b), which keeps both parameters positive.
func FitSaturation(c, y []float64) (SaturationFit, error) {
	n := len(c)
	if n != len(y) {
		return SaturationFit{}, errors.New("C and y differ in length")
	}
	if err := finite(c, y); err != nil {
		return SaturationFit{}, err
	}
	distinct := map[float64]bool{}
	for i := range c {
		if c[i] <= 0 {
			return SaturationFit{}, fmt.Errorf("concurrency %g: must be positive", c[i])
		}
		if y[i] <= 0 {
			return SaturationFit{}, fmt.Errorf("throughput %g at C=%g: must be positive", y[i], c[i])
		}
		distinct[c[i]] = true
	}
	if len(distinct) < 3 {
		return SaturationFit{}, fmt.Errorf("the saturation fit needs at least 3 concurrency levels, have %d", len(distinct))
	}

	// Work on y scaled to about 1 so that the tolerances mean the same for
	// Gbit/s and tokens/s.
	scale := floats.Max(y)
	ys := make([]float64, n)
	floats.ScaleTo(ys, 1/scale, y)

	a0, b0 := hanesWoolf(c, ys)
	sse := func(a, b float64) float64 {
		var s float64
		for i := range c {
			r := ys[i] - a*c[i]/(b+c[i])
			s += r * r
		}
		return s
	}
	problem := optimize.Problem{
		Func: func(x []float64) float64 { return sse(math.Exp(x[0]), math.Exp(x[1])) },
		Grad: func(g, x []float64) {
			a, b := math.Exp(x[0]), math.Exp(x[1])
			var ga, gb float64
			for i := range c {
				d := b + c[i]
				r := ys[i] - a*c[i]/d
				ga += -2 * r * c[i] / d
				gb += 2 * r * a * c[i] / (d * d)
			}
			g[0], g[1] = ga*a, gb*b
		},
	}
	settings := &optimize.Settings{
		GradientThreshold: 1e-13,
		Converger:         &optimize.FunctionConverge{Absolute: 1e-16, Relative: 1e-14, Iterations: 50},
		MajorIterations:   10000,
	}
	x0 := []float64{math.Log(a0), math.Log(b0)}
	res, err := optimize.Minimize(problem, x0, settings, &optimize.BFGS{})
	if err != nil || res == nil || math.IsNaN(res.F) {
		// BFGS can stop on a failed line search right at the optimum;
		// Nelder–Mead needs no gradient.
		res2, err2 := optimize.Minimize(optimize.Problem{Func: problem.Func}, x0, &optimize.Settings{
			Converger: &optimize.FunctionConverge{Absolute: 1e-16, Relative: 1e-14, Iterations: 200},
		}, &optimize.NelderMead{})
		if res == nil || (err2 == nil && res2.F < res.F) || math.IsNaN(res.F) {
			res, err = res2, err2
		}
		if res == nil || math.IsNaN(res.F) {
			return SaturationFit{}, fmt.Errorf("saturation fit did not converge: %v", err)
		}
	}
	a, b := math.Exp(res.X[0]), math.Exp(res.X[1])
	if math.IsInf(a, 0) || math.IsInf(b, 0) || a == 0 || b == 0 {
		return SaturationFit{}, errors.New("saturation fit diverged: the data do not follow a·C/(b+C)")
	}

	f := SaturationFit{A: a * scale, B: b, N: n, ASE: math.NaN(), BSE: math.NaN(), ACI95: math.NaN(), BCI95: math.NaN(), R2: math.NaN()}
	var ssr float64
	for i := range c {
		fit := f.Eval(c[i])
		f.Fitted = append(f.Fitted, fit)
		f.Residuals = append(f.Residuals, y[i]-fit)
		ssr += (y[i] - fit) * (y[i] - fit)
	}
	f.RMSE = math.Sqrt(ssr / float64(n))
	if v := stat.Variance(y, nil); v > 0 {
		f.R2 = 1 - ssr/(v*float64(n-1))
	}
	f.Extrapolated = f.B > floats.Max(c)
	if n > 2 {
		cov, err := saturationCovariance(c, f.A, f.B, ssr/float64(n-2))
		if err == nil {
			f.ASE, f.BSE = math.Sqrt(cov.At(0, 0)), math.Sqrt(cov.At(1, 1))
			t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(n - 2)}.Quantile(0.975)
			f.ACI95, f.BCI95 = t*f.ASE, t*f.BSE
		}
	}
	return f, nil
}

// saturationCovariance is s²·(JᵀJ)⁻¹ with J the Jacobian of the model
// with respect to (a, b): ∂/∂a = C/(b+C), ∂/∂b = −a·C/(b+C)².
func saturationCovariance(c []float64, a, b, s2 float64) (*mat.SymDense, error) {
	j := mat.NewDense(len(c), 2, nil)
	for i, ci := range c {
		d := b + ci
		j.Set(i, 0, ci/d)
		j.Set(i, 1, -a*ci/(d*d))
	}
	var jtj mat.SymDense
	jtj.SymOuterK(1, j.T())
	var chol mat.Cholesky
	if ok := chol.Factorize(&jtj); !ok {
		return nil, errors.New("JᵀJ is singular")
	}
	var inv mat.SymDense
	if err := chol.InverseTo(&inv); err != nil {
		return nil, err
	}
	inv.ScaleSym(s2, &inv)
	return &inv, nil
}

// hanesWoolf estimates a and b from C/y = C/a + b/a by linear least
// squares; when that gives a non-positive parameter (noisy or flat data) it
// falls back to a = 1.2·max(y), b = median(C).
func hanesWoolf(c, y []float64) (a, b float64) {
	q := make([]float64, len(c))
	for i := range c {
		q[i] = c[i] / y[i]
	}
	alpha, beta := stat.LinearRegression(c, q, nil, false)
	a, b = 1/beta, alpha/beta
	if a > 0 && b > 0 && !math.IsInf(a, 0) && !math.IsInf(b, 0) {
		return a, b
	}
	s := append([]float64(nil), c...)
	sort.Float64s(s)
	return 1.2 * floats.Max(y), s[len(s)/2]
}

func finite(xs ...[]float64) error {
	for _, x := range xs {
		for _, v := range x {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("non-finite value %g", v)
			}
		}
	}
	return nil
}

// KneeStep is the gain from one concurrency to the next.
type KneeStep struct {
	From, To int
	// TPSGain and RailGain are relative gains (0.05 = 5 %) of input
	// tokens/s and of rail throughput.
	TPSGain, RailGain float64
	// Below: both gains are below the threshold.
	Below bool
}

// Knee is the first concurrency from which both the input-TPS gain and the
// rail-throughput gain to the next point fall below Threshold.
type Knee struct {
	Threshold float64
	Steps     []KneeStep
	// C is the knee; 0 when no step falls below the threshold.
	C int
}

// FindKnee computes the knee from points sorted by concurrency.
func FindKnee(conc []int, tps, rail []float64, threshold float64) (Knee, error) {
	if len(conc) != len(tps) || len(conc) != len(rail) {
		return Knee{}, errors.New("knee: lengths differ")
	}
	if !sort.IntsAreSorted(conc) {
		return Knee{}, errors.New("knee: points not sorted by concurrency")
	}
	k := Knee{Threshold: threshold}
	for i := 0; i+1 < len(conc); i++ {
		s := KneeStep{From: conc[i], To: conc[i+1], TPSGain: tps[i+1]/tps[i] - 1, RailGain: rail[i+1]/rail[i] - 1}
		s.Below = s.TPSGain < threshold && s.RailGain < threshold
		if s.Below && k.C == 0 {
			k.C = s.From
		}
		k.Steps = append(k.Steps, s)
	}
	return k, nil
}
