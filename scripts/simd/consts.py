import mpmath as mp
mp.mp.dps = 50
ln2 = mp.log(2)
h32 = mp.mpf(float(__import__('struct').unpack('f', __import__('struct').pack('f', float(ln2)))[0]))
print('f32 ln2_hi %.12g lo %.9g' % (float(h32), float(ln2 - h32)))
h64 = mp.mpf(float(ln2))
print('f64 ln2_hi %r lo %r' % (float(h64), float(ln2 - h64)))
print('log2e %r sqrt2 %r' % (float(1/ln2), float(mp.sqrt(2))))
print('atanh(.5) %r' % float(mp.atanh(0.5)))
print('ln FLT_MAX', mp.log(mp.mpf(2)**128*(1-mp.mpf(2)**-24)), 'ln 2^-150', mp.log(mp.mpf(2)**-150))
print('ln DBL_MAX', mp.log(mp.mpf(2)**1024*(1-mp.mpf(2)**-53)), 'ln 2^-1075', mp.log(mp.mpf(2)**-1075))
print('expm1 -1 float', mp.log(mp.mpf(2)**-25), 'double', mp.log(mp.mpf(2)**-54))
