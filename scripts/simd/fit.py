import mpmath as mp, struct, sys
from remez import remez
mp.mp.dps = 60
def f32(x): return struct.unpack('f', struct.pack('f', float(x)))[0]
def f64(x): return float(x)

def Qexp(r):
    if abs(r) < mp.mpf('1e-20'): return mp.mpf(1)/2 + r/6
    return (mp.exp(r) - 1 - r) / r**2
ln2h = mp.log(2)/2
def report(name, c, emax, rnd, ulp):
    cr = [rnd(x) for x in c]
    print(name, 'emax=%.3g (%.3f ulp)' % (float(emax), float(emax/ulp)))
    for x in cr: print('   %r' % x if rnd is f64 else '   %.9g' % x)
    return cr

which = sys.argv[1] if len(sys.argv) > 1 else ""
if which == 'expf':
    for n in (4, 5):
        c, e = remez(Qexp, lambda r: (r*r+mp.mpf("1e-4"))/mp.exp(r), -ln2h, ln2h, n)
        report('expf Q deg %d' % n, c, e, f32, mp.mpf(2)**-24)
if which == 'expd':
    for n in (8, 9):
        c, e = remez(Qexp, lambda r: (r*r+mp.mpf("1e-4"))/mp.exp(r), -ln2h, ln2h, n, grid=3000)
        report('expd Q deg %d' % n, c, e, f64, mp.mpf(2)**-53)
zmax = ((mp.sqrt(2)-1)/(mp.sqrt(2)+1))**2
def Rlog(z):
    s = mp.sqrt(z)
    if z < mp.mpf('1e-30'): return mp.mpf(1)/3 + z/5
    return (mp.atanh(s)/s - 1)/z
if which == 'logf':
    for n in (2, 3):
        c, e = remez(Rlog, lambda z: z + zmax*mp.mpf("1e-3"), 0, zmax, n)   # rel. error of atanh(s)/s
        report('logf R deg %d' % n, c, e, f32, mp.mpf(2)**-24)
if which == 'logd':
    for n in (5, 6, 7):
        c, e = remez(Rlog, lambda z: z + zmax*mp.mpf("1e-3"), 0, zmax, n, grid=3000)
        report('logd R deg %d' % n, c, e, f64, mp.mpf(2)**-53)
th = mp.atanh(mp.mpf(1)/2)
def Ptanh(z):
    if z < mp.mpf('1e-30'): return -mp.mpf(1)/3 + 2*z/15
    x = mp.sqrt(z)
    return (mp.tanh(x)/x - 1)/z
if which == 'tanhf':
    for n in (3, 4, 5):
        c, e = remez(Ptanh, lambda z: z + mp.mpf("1e-4"), 0, th**2, n)
        report('tanhf P deg %d' % n, c, e, f32, mp.mpf(2)**-24)
if which == 'tanhd':
    for n in (8, 9, 10, 11):
        c, e = remez(Ptanh, lambda z: z + mp.mpf("1e-4"), 0, th**2, n, grid=3000)
        report('tanhd P deg %d' % n, c, e, f64, mp.mpf(2)**-53)
