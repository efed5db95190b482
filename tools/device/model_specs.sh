# Sourced by tools/device/model_gpu.sh and model_check.sh: `model_spec NAME` sets SPEC (the model as
# kbench names it), SHAPE, FMT (memory format) and SEL (the selector for its zero-shot cache) of a model
# those scripts run: r3d_18, r2plus1d_18, mc3_18 (16x3x16x112x112, channels_last_3d), unet3d (the 3D U-Net of
# tools/collect/networks_3d.py, 2x1x96x96x96) or a 2D torchvision name (128x3x224x224, channels_last).
model_spec() {
  case $1 in
    r3d_18|r2plus1d_18|mc3_18) SPEC=torchvision:$1; SHAPE=16,3,16,112,112; FMT=channels_last_3d; SEL=h200-3d-pytorch ;;
    unet3d) SPEC=tools.collect.networks_3d:unet3d; SHAPE=2,1,96,96,96; FMT=channels_last_3d; SEL=h200-3d-pytorch ;;
    *) SPEC=torchvision:$1; SHAPE=128,3,224,224; FMT=channels_last; SEL=h200-pytorch ;;
  esac
}
