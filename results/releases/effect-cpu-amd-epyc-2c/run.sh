cd runs/releases   # from the repository root; each .venv-* holds this project and that release
export TQDM_DISABLE=1
run() { v=$1; shift; echo "== $v $*"; ../../$v/bin/teacache-calib drift --dtypes float32 --floor-processes 2 --oracles "$@"; echo "rc=$?"; }
run .venv-mflux-0.21.0 --save s-0.21.0 --out o-0.21.0
run .venv-mflux-0.22.0 --against s-0.21.0 --save s-0.22.0 --out o-0.22.0
run .venv-mflux-0.23.0 --against s-0.22.0 --save s-0.23.0 --out o-0.23.0
run .venv --against s-0.23.0 --save s-0.24.0 --out o-0.24.0
run .venv-mlx-0.32.4 --against s-0.24.0 --save s-0.24.0-mlx-0.32.4 --out o-0.24.0-mlx-0.32.4
echo chain-done
