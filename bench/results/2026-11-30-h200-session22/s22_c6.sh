# Session 22, call 6 (carry .deps, .whl): what cuDNN's FP8 forward runs, for the record: ncu (full set) of its
# kernel at d 128 and d 256, 8k, no mask (bench/probes/ncu_cudnn_fp8.py): launch shape, registers, shared
# memory, pipes and warp states, to set beside call 1's ncu of flashgen's.
. bench/device_prelude.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
for d in 128 256; do
  python3 bench/probes/ncu_cudnn_fp8.py $d 8192 > $L/warm_$d.log 2>&1
  timeout 150 ncu --set full -k regex:sdpa --launch-skip 2 --launch-count 1 -o $L/ncu_cudnn_$d python3 bench/probes/ncu_cudnn_fp8.py $d 8192 > $L/ncu_cudnn_$d.log 2>&1; el "ncu $d rc=$?"
  ncu --import $L/ncu_cudnn_$d.ncu-rep --page details > $L/ncu_cudnn_$d.txt 2>&1; rm -f $L/ncu_cudnn_$d.ncu-rep; pk
done
grep -a -E "^  [a-z_]|Duration|SM Frequency|Grid Size|Block Size|Registers Per|Dynamic Shared|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Tensor|Compute \(SM\) Throughput" $L/ncu_cudnn_128.txt $L/ncu_cudnn_256.txt | cut -c1-150
pk
