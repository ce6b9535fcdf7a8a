# Discrete Remez exchange: minimise max |w(x) * (f(x) - sum c_j x^(p0 + j*step))| on [a,b].
import mpmath as mp
mp.mp.dps = 60

def remez(f, w, a, b, n, p0=0, step=1, grid=4000, iters=40):
    basis = lambda x, j: x ** (p0 + j * step)
    xs = [a + (b - a) * (1 - mp.cos(mp.pi * k / grid)) / 2 for k in range(grid + 1)]
    fx = [f(x) for x in xs]; wx = [w(x) for x in xs]
    m = n + 1  # coefficients
    # initial reference: chebyshev-ish subset
    idx = [int(round(grid * k / (m))) for k in range(m + 1)]
    best = None
    for it in range(iters):
        A = mp.matrix(m + 1, m + 1); rhs = mp.matrix(m + 1, 1)
        for i, k in enumerate(idx):
            x = xs[k]
            for j in range(m):
                A[i, j] = basis(x, j)
            A[i, m] = (-1) ** i / wx[k]
            rhs[i] = fx[k]
        sol = mp.lu_solve(A, rhs)
        c = [sol[j] for j in range(m)]
        err = [wx[k] * (fx[k] - sum(c[j] * basis(xs[k], j) for j in range(m))) for k in range(len(xs))]
        emax = max(abs(e) for e in err)
        best = (c, emax)
        # new reference: local extrema with alternating sign
        ext = []
        for k in range(len(xs)):
            e = err[k]
            left = err[k - 1] if k > 0 else None
            right = err[k + 1] if k < len(xs) - 1 else None
            if (left is None or abs(e) >= abs(left)) and (right is None or abs(e) >= abs(right)):
                ext.append(k)
        # merge same-sign runs, keep largest
        alt = []
        for k in ext:
            if alt and mp.sign(err[alt[-1]]) == mp.sign(err[k]):
                if abs(err[k]) > abs(err[alt[-1]]):
                    alt[-1] = k
            else:
                alt.append(k)
        while len(alt) > m + 1:
            # drop smaller end
            if abs(err[alt[0]]) < abs(err[alt[-1]]):
                alt.pop(0)
            else:
                alt.pop()
        if len(alt) < m + 1:
            break
        if alt == idx:
            break
        idx = alt
    return best
