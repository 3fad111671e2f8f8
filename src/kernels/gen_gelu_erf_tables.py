#!/usr/bin/env python3
"""Fits the segment polynomials R and E of src/kernels/gelu_erf.cc (its header says what they are):
degree-4 weighted least squares at Chebyshev nodes on 8 segments of t in [0, TMAX], coefficients
rounded to fp32 one at a time, against mpmath. Prints the C++ tables and each segment's fit
error in units of 2^-24. Run with a Python that has mpmath and numpy (the peers' environment):
  gen_gelu_erf_tables.py R 3.0 4;  gen_gelu_erf_tables.py E 3.0 4   (name, K, degree)
It first prints the exploratory fits (other degrees) it was chosen from, then the tables."""
import mpmath as mp, numpy as np, sys
mp.mp.dps = 40
c = 1/mp.sqrt(2*mp.pi)
def R(t): return mp.erfc(t/mp.sqrt(2))/2*mp.exp(t*t/2)
t0 = mp.findroot(lambda t: R(t) - c*t, 0.75)
def E(t):
    if abs(t - t0) < mp.mpf('1e-12'):  # removable: derivative
        return -mp.diff(lambda s: R(s)-c*s, t0)
    return (R(t) - c*t)/(t0 - t)
TMAX = 14.5
def fit(f, K, deg, nseg=8, npts=60):
    A = nseg*(TMAX+K)/TMAX*1.0000001
    worst = 0; coefs = []
    for k in range(nseg):
        nodes = [mp.cos(mp.pi*(j+0.5)/npts)/2 for j in range(npts)]  # s in (-0.5,0.5)
        ts = [K*(k+0.5+s)/(A-(k+0.5+s)) for s in nodes]
        ys = [f(t) for t in ts]
        M = np.array([[float(s)**i for i in range(deg+1)] for s in nodes])
        y = np.array([float(v) for v in ys]); W = 1/np.abs(y)
        cf = np.linalg.lstsq(M*W[:,None], y*W, rcond=None)[0]
        cf32 = cf.astype(np.float32)
        # check on dense grid
        ss = np.linspace(-0.5, 0.5, 301)
        for s in ss:
            t = K*(k+0.5+s)/(A-(k+0.5+s))
            v = float(f(mp.mpf(t)))
            p = sum(float(cf32[i])*s**i for i in range(deg+1))
            worst = max(worst, abs(p/v-1))
        coefs.append(cf32)
    return A, worst, coefs
if __name__ == '__main__':
    for K in [float(a) for a in sys.argv[2:]]:
        for deg in [6,7,8]:
            A, w, _ = fit(R if sys.argv[1]=='R' else E, K, deg)
            print(sys.argv[1], K, deg, 'rel err %.3g ulp %.3f' % (w, w/2**-24))
import mpmath as mp, numpy as np, sys
NSEG=8
f32 = lambda v: float(np.float32(v))
def run(name, f, K, deg, npts=40):
    A = f32(NSEG*(TMAX+K)/TMAX*1.000001)
    T = lambda u: K*u/(A-u)
    ctrs, scales, cfs, errs = [], [], [], []
    for k in range(NSEG):
        tk = f32(T(k+0.5)); Bk = f32(A*K/(tk+K))
        tof = lambda s: (s*K + tk*Bk)/(Bk - s)
        a, b = -0.52, 0.52
        nodes = (a+b)/2 + (b-a)/2*np.cos(np.pi*(np.arange(npts)+0.5)/npts)
        ts = [tof(s) for s in nodes]
        y = np.array([float(f(mp.mpf(t))) for t in ts])
        M = np.vander(nodes, deg+1, increasing=True); W = 1/np.abs(y)
        fixed = []
        for i in range(deg+1):
            rem = y - (M[:, :i] @ np.array(fixed) if i else 0)
            cf = np.linalg.lstsq(M[:, i:]*W[:,None], rem*W, rcond=None)[0]
            fixed.append(f32(cf[0]))
        ss = np.linspace(a, b, 201)
        tt = [tof(s) for s in ss]
        v = np.array([float(f(mp.mpf(t))) for t in tt])
        p = np.polyval(np.array(fixed[::-1]), ss)
        ctrs.append(tk); scales.append(Bk); cfs.append(fixed); errs.append(np.max(np.abs(p/v-1))/2**-24)
    print('// %s: K %r A %r deg %d; fit error in units of 2^-24: %s' % (name, K, A, deg, ' '.join('%.2f'%e for e in errs)))
    print('alignas(32) constexpr float k%sCentre[8] = {%s};' % (name, ', '.join('%.9gf' % c for c in ctrs)))
    print('alignas(32) constexpr float k%sScale[8] = {%s};' % (name, ', '.join('%.9gf' % c for c in scales)))
    print('alignas(32) constexpr float k%s[%d][8] = {' % (name, deg+1))
    for i in range(deg+1):
        print('    {%s},' % ', '.join('%.9gf' % cf[i] for cf in cfs))
    print('};')
run(sys.argv[1], R if sys.argv[1]=='R' else E, float(sys.argv[2]), int(sys.argv[3]))
